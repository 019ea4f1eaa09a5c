// attnscope — error types.
//
// Every failure a user can cause is thrown as one of these, with a message that is
// one complete line: the file, the array or option, what was expected, what was found.
// The command-line front end is the one place that catches them and picks the exit
// code (DESIGN.md: 0 success, 1 runtime failure, 2 usage or bad input).
#pragma once

#include <stdexcept>
#include <string>

namespace attnscope {

// Bad input: an unreadable, malformed or inconsistent file, array or shape. Exit 2.
struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// An input or a run that would need more memory than the limit allows (--max-memory).
// Refused before the memory is allocated. Exit 2, like other input the run cannot take.
struct MemoryLimitError : InputError {
    using InputError::InputError;
};

// Contradictory or out-of-range options. Exit 2.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A failure while producing results (cannot write an output, out of memory). Exit 1.
struct RuntimeFailure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace attnscope
