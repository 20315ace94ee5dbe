#include "textflag.h"

// func prefetch(b []byte)
// Issues PREFETCHT0 for every 64-byte line of b. Prefetches never fault and
// do not hold up the instructions after them, unlike loads.
TEXT ·prefetch(SB), NOSPLIT, $0-24
	MOVQ b_base+0(FP), AX
	MOVQ b_len+8(FP), CX
	ADDQ AX, CX
loop:
	CMPQ AX, CX
	JAE  done
	PREFETCHT0 (AX)
	ADDQ $64, AX
	JMP  loop
done:
	RET
