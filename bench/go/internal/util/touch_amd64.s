// SPDX-License-Identifier: MIT
#include "textflag.h"

// func Touch900K()
TEXT ·Touch900K(SB), 0, $921600-0
	MOVQ SP, DI
	ADDQ $921600, DI
	MOVQ $225, CX
loop900:
	SUBQ $4096, DI
	MOVB $1, (DI)
	DECQ CX
	JNZ loop900
	RET

// func Touch256K()
TEXT ·Touch256K(SB), 0, $262144-0
	MOVQ SP, DI
	ADDQ $262144, DI
	MOVQ $64, CX
loop256:
	SUBQ $4096, DI
	MOVB $1, (DI)
	DECQ CX
	JNZ loop256
	RET
