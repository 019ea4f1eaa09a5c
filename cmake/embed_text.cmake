# Writes OUTPUT, a C++ header holding the text of INPUT as `inline constexpr const char
# NAME[]` (a raw string literal) in namespace attnscope::html_detail: the HTML page's
# script and style sheet live in real .js/.css files that tools can check, and reach the
# program at build time. Run as `cmake -DINPUT=... -DOUTPUT=... -DNAME=... -P embed_text.cmake`.
file(READ "${INPUT}" text)
set(delimiter "attnscope_text")
string(FIND "${text}" ")${delimiter}\"" clash)
string(FIND "${text}" "</script" closes)
string(FIND "${text}" "</style" closes_style)
if(NOT clash EQUAL -1 OR NOT closes EQUAL -1 OR NOT closes_style EQUAL -1)
  message(FATAL_ERROR "${INPUT}: holds \")${delimiter}\"\", \"</script\" or \"</style\", which cannot be embedded")
endif()
get_filename_component(name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
  "// Generated from src/report/${name} by cmake/embed_text.cmake at build time: edit that file.\n"
  "#pragma once\n\nnamespace attnscope::html_detail {\n\ninline constexpr const char ${NAME}[] = R\"${delimiter}("
  "${text})${delimiter}\";\n\n}  // namespace attnscope::html_detail\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
