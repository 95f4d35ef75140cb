/* SPDX-License-Identifier: MIT */
/*
 * A library whose soname is libunwind.so.8 and that has none of libunwind's
 * functions (tests/tools/deadlocked.c says why).
 */
__attribute__((visibility("default"))) int fern_test_no_libunwind(void)
{
    return 8;
}
