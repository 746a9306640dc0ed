package pgcopy

import (
	"strconv"
	"unicode/utf8"
)

// The truncation marker ends a value cut to a size limit:
// "[postgrescopy: truncated from N bytes]", N being the value's size before.
const (
	markerHead = "[postgrescopy: truncated from "
	markerTail = " bytes]"
)

// AppendMarker appends the truncation marker for a value of n bytes.
func AppendMarker(dst []byte, n int) []byte {
	dst = append(dst, markerHead...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, markerTail...)
}

// MarkerLen is the length of AppendMarker's output for n.
func MarkerLen(n int) int {
	digits := 1
	for v := n; v >= 10; v /= 10 {
		digits++
	}
	return len(markerHead) + digits + len(markerTail)
}

// RuneCut returns the largest i <= n (and <= len(b)) at which b, valid
// UTF-8, can be cut without splitting a character.
func RuneCut(b []byte, n int) int {
	if n >= len(b) {
		return len(b)
	}
	if n <= 0 {
		return 0
	}
	i := n
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

// AppendCleanLimit is AppendClean bounded to limit bytes of output: a longer
// value keeps its longest prefix, cut between characters, that leaves room for
// the truncation marker, and then the marker. The bound applies after
// cleaning, because U+FFFD (3 bytes) replaces single bytes. A limit shorter
// than the marker leaves the marker alone.
func AppendCleanLimit(dst []byte, s string, limit int) []byte {
	limit = max(limit, 0)
	start := len(dst)
	in := s
	if len(in) > limit {
		// Cleaning never shrinks its input, so this prefix already yields
		// more than limit bytes; a character it splits lands in the tail that
		// the cut below removes, since the marker is longer than 3 × 3 bytes.
		in = in[:limit]
	}
	dst = AppendClean(dst, in)
	if len(in) == len(s) && len(dst)-start <= limit {
		return dst
	}
	keep := limit - MarkerLen(len(s))
	cut := start + RuneCut(dst[start:], keep)
	return AppendMarker(dst[:cut], len(s))
}
