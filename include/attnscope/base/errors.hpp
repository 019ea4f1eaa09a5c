// attnscope — error types.
//
// Every failure a user can cause is thrown as one of these, with a message that is
// one complete line: the file, the array or option, what was expected, what was found.
// The command-line front end is the one place that catches them and picks the exit
// code (docs/design.md, "Errors": 0 success, 1 runtime failure, 2 usage or bad input).
//
// The library knows no command-line flags. A message names an option by its field,
// written in braces: "{heads} 3: does not divide the value width", "pass {layout} torch".
// what() spells each such field as its bare name ("heads 3: ..."); a front end spells
// them its own way with text(spell), e.g. the CLI as "--heads 3: ...".
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace attnscope {

// `message` with every "{field}" replaced by spell(field); an unmatched brace stays as it is.
std::string spell_fields(std::string_view message, const std::function<std::string(std::string_view)>& spell);

class Error : public std::runtime_error {
   public:
    explicit Error(const std::string& message)
        : std::runtime_error(spell_fields(message, [](std::string_view f) { return std::string(f); })),
          message_(message) {}
    // The message with each "{field}" spelled by `spell`.
    std::string text(const std::function<std::string(std::string_view)>& spell) const {
        return spell_fields(message_, spell);
    }

   private:
    std::string message_;
};

// Bad input: an unreadable, malformed or inconsistent file, array or shape. Exit 2.
struct InputError : Error {
    using Error::Error;
};

// An input or a run that would need more memory than the limit allows ({max_memory}).
// Refused before the memory is allocated. Exit 2, like other input the run cannot take.
struct MemoryLimitError : InputError {
    using InputError::InputError;
};

// Contradictory or out-of-range options. Exit 2.
struct UsageError : Error {
    using Error::Error;
};

// A failure while producing results (cannot write an output, out of memory). Exit 1.
struct RuntimeFailure : Error {
    using Error::Error;
};

}  // namespace attnscope
