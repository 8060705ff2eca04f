# embed_files(target out.cpp symbol files...)
# Generates out.cpp defining `const EmbeddedFile symbol[]` (name, text) terminated by
# {nullptr, nullptr}, regenerated whenever one of the files changes.
function(embed_files target out symbol)
  string(REPLACE ";" "|" files "${ARGN}")
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DSYMBOL=${symbol} "-DFILES=${files}"
            -P ${CMAKE_SOURCE_DIR}/cmake/EmbedScript.cmake
    DEPENDS ${ARGN} ${CMAKE_SOURCE_DIR}/cmake/EmbedScript.cmake
    COMMENT "Embedding ${symbol}" VERBATIM)
  add_custom_target(${target} DEPENDS ${out})
  set_source_files_properties(${out} PROPERTIES COMPILE_OPTIONS -Wno-error)  # generated: no -Werror
endfunction()
