# ember_vulkan_shaders(DIR GEN_DIR OUT_C OUT_INCS) — the Vulkan backend's shader variants.
#
# Reads every DIR/*.list. Each line (after '#' comments) names variants:
#
#     NAME-TEMPLATE  SOURCE.comp  [KEY=ALT1|ALT2|...]...  [FLAG]...
#
# The KEY=... tokens multiply: one variant per combination, each compiled with -DKEY=ALT (a
# FLAG token is -DFLAG for all). In a name template and in later alternatives, @KEY@ is the
# value an earlier KEY took, so `A=*all* O=@A@|b8` gives (A, A) and (A, b8) for every tag. The
# words *all*, *float*, *int* stand for the dtype tags of those kinds (*int*: i64 i32 i16 i8
# u8). Variants that come out with one name twice are compiled once. A variant whose defines
# hold f64 (i64) also gets -DUSE_F64 (-DUSE_I64): only those use 64-bit types. KEY=TAG with a
# float tag also defines KEY_ISF (glslang's #if cannot paste tokens: `#ifdef A_ISF`).
#
# Each variant is compiled by glslc (Vulkan 1.2 SPIR-V, optimized) into GEN_DIR/NAME.inc, a C
# initializer; OUT_C (written at configure time) embeds them all as vk_spirv_table. OUT_INCS
# gets the list of .inc files (to make OUT_C's object depend on them).
function(ember_vulkan_shaders dir gen_dir out_c out_incs)
  file(GLOB lists CONFIGURE_DEPENDS ${dir}/*.list)
  file(GLOB glsl_deps CONFIGURE_DEPENDS ${dir}/*.glsl)
  set(all_tags "f32|f64|f16|bf16|i64|i32|i16|i8|u8|b8")
  set(float_tags "f32|f64|f16|bf16")
  set(int_tags "i64|i32|i16|i8|u8")
  set(names)
  set(incs)
  set(c_decls "")
  set(c_table "")
  set(k 0)
  file(MAKE_DIRECTORY ${gen_dir})
  foreach(lf ${lists})
    # an edited list reconfigures (its variants are read here, at configure time)
    set_property(DIRECTORY ${CMAKE_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${lf})
    file(STRINGS ${lf} lines)
    foreach(line ${lines})
      string(REGEX REPLACE "#.*$" "" line "${line}")
      string(STRIP "${line}" line)
      if(line STREQUAL "")
        continue()
      endif()
      separate_arguments(toks UNIX_COMMAND "${line}")
      list(LENGTH toks ntok)
      if(ntok LESS 2)
        message(FATAL_ERROR "${lf}: '${line}': want NAME SOURCE [KEY=...]...")
      endif()
      list(GET toks 0 tpl)
      list(GET toks 1 src)
      list(SUBLIST toks 2 -1 rest)
      # variants: each a string of defines "K1=V1,K2=V2" ("" at first)
      set(variants "<>")
      foreach(tok ${rest})
        if(tok MATCHES "^([A-Za-z_0-9]+)=(.*)$")
          set(key ${CMAKE_MATCH_1})
          set(alts_tpl ${CMAKE_MATCH_2})
          string(REPLACE "*all*" "${all_tags}" alts_tpl "${alts_tpl}")
          string(REPLACE "*float*" "${float_tags}" alts_tpl "${alts_tpl}")
          string(REPLACE "*int*" "${int_tags}" alts_tpl "${alts_tpl}")
          set(next)
          foreach(v ${variants})
            set(alts "${alts_tpl}")
            string(REGEX MATCHALL "[A-Za-z_0-9]+=[^,<>]*" defs "${v}")
            foreach(def ${defs})
              string(REGEX REPLACE "=.*$" "" dk "${def}")
              string(REGEX REPLACE "^[^=]*=" "" dv "${def}")
              string(REPLACE "@${dk}@" "${dv}" alts "${alts}")
            endforeach()
            string(REPLACE "|" ";" alist "${alts}")
            foreach(a ${alist})
              string(REPLACE ">" ",${key}=${a}>" nv "${v}")
              list(APPEND next "${nv}")
            endforeach()
          endforeach()
          set(variants ${next})
        else()
          set(next)
          foreach(v ${variants})
            string(REPLACE ">" ",${tok}=1>" nv "${v}")
            list(APPEND next "${nv}")
          endforeach()
          set(variants ${next})
        endif()
      endforeach()
      foreach(v ${variants})
        set(name "${tpl}")
        set(flags)
        string(REGEX MATCHALL "[A-Za-z_0-9]+=[^,<>]*" defs "${v}")
        set(use64)
        foreach(def ${defs})
          string(REGEX REPLACE "=.*$" "" dk "${def}")
          string(REGEX REPLACE "^[^=]*=" "" dv "${def}")
          string(REPLACE "@${dk}@" "${dv}" name "${name}")
          list(APPEND flags "-D${dk}=${dv}")
          if(dv MATCHES "^(f32|f64|f16|bf16)$")
            list(APPEND flags "-D${dk}_ISF")
          endif()
          if(dv STREQUAL "f64")
            list(APPEND use64 -DUSE_F64)
          elseif(dv STREQUAL "i64")
            list(APPEND use64 -DUSE_I64)
          endif()
        endforeach()
        list(REMOVE_DUPLICATES use64)
        if(name IN_LIST names)
          continue()
        endif()
        list(APPEND names "${name}")
        set(inc ${gen_dir}/${name}.inc)
        add_custom_command(OUTPUT ${inc}
          COMMAND Vulkan::glslc --target-env=vulkan1.2 -O -mfmt=c -I${dir} ${flags} ${use64}
                  -o ${inc} ${dir}/${src}
          DEPENDS ${dir}/${src} ${glsl_deps} ${lf}
          COMMENT "glslc ${name}" VERBATIM)
        list(APPEND incs ${inc})
        string(APPEND c_decls "static const uint32_t spv_${k}[] =\n#include \"${name}.inc\"\n;\n")
        string(APPEND c_table "    {\"${name}\", spv_${k}, sizeof spv_${k}},\n")
        math(EXPR k "${k} + 1")
      endforeach()
    endforeach()
  endforeach()
  string(CONCAT text "/* Generated by cmake/ember_vulkan_shaders.cmake from the .list files of\n"
           " * src/backends/vulkan/shaders:\n"
           " * the SPIR-V of every shader variant. Do not edit. */\n"
           "#include <stddef.h>\n#include <stdint.h>\n\n#include \"vk_internal.h\"\n\n"
           "${c_decls}\nconst vk_spirv vk_spirv_table[] = {\n${c_table}    {NULL, NULL, 0}};\n"
           "const size_t vk_spirv_count = ${k};\n")
  file(CONFIGURE OUTPUT ${out_c} CONTENT "${text}" @ONLY)
  set(${out_incs} ${incs} PARENT_SCOPE)
endfunction()
