/* SPDX-License-Identifier: MIT */
/* The executable of tests/watch/preempt/withfern_lib.c: fern lives in the listed
 * shared library only. */
int withfern_main(void);

int main(void) { return withfern_main(); }
