// SPDX-License-Identifier: MIT
package util

// Touch900K has a 900 KiB frame (assembly): its prologue grows the goroutine
// stack to fit, then it writes one byte per 4 KiB page of the frame, top
// down, like the C programs' alloca'd block. (A Go array local would be
// zeroed in full, 225x more writes than the C version does.)
func Touch900K()

// Touch256K: the same with a 256 KiB frame.
func Touch256K()
