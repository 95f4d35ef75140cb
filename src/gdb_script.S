/*
 * The gdb extension (gdb/fern-gdb.py), embedded in the library as an inline
 * script of a .debug_gdb_scripts section: gdb runs it when it loads the
 * library (if auto-load allows the library's path), so the commands are
 * there for a build tree, a static link, or any install location. The
 * section is not allocated: it costs file size, no memory. `strip -g`
 * removes it; the installed share/gdb/auto-load copy covers that case.
 *
 * Entry format (gdb manual, "dotdebug_gdb_scripts section"): byte 4 (an
 * inline Python script), the script's name on the first line, its text,
 * a NUL.
 */
        .section .debug_gdb_scripts, "MS", @progbits, 1
        .byte   4
        .ascii  "gdb.inlined-script.fern\n"
        .incbin FERN_GDB_SCRIPT
        .byte   0

        .section .note.GNU-stack, "", @progbits
