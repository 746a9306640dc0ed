package jsonb

import (
	"strconv"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
)

// TruncatedKey is the member that an object cut to a size limit gains; its
// value is the document's size in bytes before the cut.
const TruncatedKey = "[postgrescopy: truncated]"

// Truncate appends doc, a valid JSON document, cut to at most limit bytes
// when it is longer, keeping it valid JSON of the same top-level type: it
// keeps the longest prefix that fits, closes what is open, and marks the cut
// where it happened — a string gets pgcopy's truncation marker appended, an
// array gains the marker as a last element, an object gains the member
// TruncatedKey — and, when the cut is deeper, at the top level too, so that
// `doc ? '[postgrescopy: truncated]'` finds every cut object. Whole members
// and elements are kept or dropped; only strings are cut inside. A limit too
// small for any marker (under about 50 bytes) yields {}, [], "" or null.
func Truncate(dst, doc []byte, limit int) []byte {
	if len(doc) <= limit {
		return append(dst, doc...)
	}
	t := truncator{doc: doc, limit: limit, orig: len(doc)}
	t.walk(func(p int, kind cutKind) bool {
		if p+t.suffixLen(kind) <= limit {
			t.best, t.bestKind, t.found = p, kind, true
		}
		return p < limit // a later cut cannot fit: every suffix is at least 1 byte
	})
	if !t.found {
		return append(dst, t.empty()...)
	}
	// Walk again to the chosen cut to recover what was open there.
	best, bestKind := t.best, t.bestKind
	t.walk(func(p int, kind cutKind) bool { return p != best || kind != bestKind })
	dst = append(dst, doc[:best]...)
	return t.appendSuffix(dst, bestKind)
}

type cutKind uint8

const (
	cutAfterOpen cutKind = iota // right after '{' or '[': no element kept yet
	cutAfterElem                // after a complete element or member
	cutInString                 // inside a string value, between characters
)

type frame struct {
	typ   byte // '{' or '['
	elems int  // complete elements so far
}

type truncator struct {
	doc      []byte
	limit    int
	orig     int
	stack    []frame
	best     int
	bestKind cutKind
	found    bool
}

// walk scans t.doc, calling cut at every place where it could be cut, with
// t.stack describing the open containers there, until cut returns false or
// the document ends (or turns out not to be JSON).
func (t *truncator) walk(cut func(p int, kind cutKind) bool) {
	d := t.doc
	t.stack = t.stack[:0]
	i := skipSpace(d, 0)
	for {
		// A value starts at i.
		if i >= len(d) {
			return
		}
		switch c := d[i]; {
		case c == '{' || c == '[':
			t.stack = append(t.stack, frame{typ: c})
			i++
			if !cut(i, cutAfterOpen) {
				return
			}
			i = skipSpace(d, i)
			if i < len(d) && (d[i] == '}' || d[i] == ']') {
				t.stack = t.stack[:len(t.stack)-1]
				i++
				break // the container is a complete value
			}
			if c == '{' {
				if i = t.key(i); i < 0 {
					return
				}
			}
			continue // its first element starts at i
		case c == '"':
			end, ok := t.str(i, cut)
			if !ok {
				return
			}
			i = end
		default:
			i = scalarEnd(d, i)
			if i < 0 {
				return
			}
		}
		// A value ended at i: close the containers it completes.
		for {
			if len(t.stack) == 0 {
				return
			}
			top := &t.stack[len(t.stack)-1]
			top.elems++
			if !cut(i, cutAfterElem) {
				return
			}
			i = skipSpace(d, i)
			if i >= len(d) {
				return
			}
			if d[i] == ',' {
				i = skipSpace(d, i+1)
				if top.typ == '{' {
					if i = t.key(i); i < 0 {
						return
					}
				}
				break
			}
			if d[i] != '}' && d[i] != ']' {
				return
			}
			t.stack = t.stack[:len(t.stack)-1]
			i++
		}
	}
}

// key skips a member's key and colon and returns where its value starts, or
// -1.
func (t *truncator) key(i int) int {
	end, ok := t.str(i, nil)
	if !ok {
		return -1
	}
	i = skipSpace(t.doc, end)
	if i >= len(t.doc) || t.doc[i] != ':' {
		return -1
	}
	return skipSpace(t.doc, i+1)
}

// str scans the string starting at d[i] == '"' and returns the index after
// its closing quote. With cut, it offers a cut before each character or
// escape (a surrogate pair counts as one).
func (t *truncator) str(i int, cut func(int, cutKind) bool) (int, bool) {
	d := t.doc
	if i >= len(d) || d[i] != '"' {
		return 0, false
	}
	i++
	for i < len(d) {
		if cut != nil && !cut(i, cutInString) {
			return 0, false
		}
		switch c := d[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(d) {
				return 0, false
			}
			if d[i+1] != 'u' {
				i += 2
				continue
			}
			i += 6
			// Keep a high surrogate with its low half: jsonb refuses a lone one.
			if i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u' && isHighSurrogate(d[i-4:i]) {
				i += 6
			}
		case c < 0x80:
			i++
		default:
			i++
			for i < len(d) && d[i]&0xC0 == 0x80 {
				i++
			}
		}
	}
	return 0, false
}

func isHighSurrogate(hex4 []byte) bool {
	v, err := strconv.ParseUint(string(hex4), 16, 16)
	return err == nil && v >= 0xD800 && v <= 0xDBFF
}

func skipSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// scalarEnd returns the end of the number or literal at d[i], or -1.
func scalarEnd(d []byte, i int) int {
	start := i
	for i < len(d) {
		c := d[i]
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '+' || c == '.' || c == 'E' {
			i++
			continue
		}
		break
	}
	if i == start {
		return -1
	}
	return i
}

func (t *truncator) objMarkerLen() int {
	return len(TruncatedKey) + 3 + len(strconv.Itoa(t.orig)) // "key":N
}

func (t *truncator) arrMarkerLen() int { return pgcopy.MarkerLen(t.orig) + 2 }

// suffixLen is the length appendSuffix would add for a cut of kind with the
// current stack.
func (t *truncator) suffixLen(kind cutKind) int {
	depth := len(t.stack)
	n := depth // closing brackets
	switch kind {
	case cutInString:
		n += pgcopy.MarkerLen(t.orig) + 1
	default:
		top := t.stack[depth-1]
		if top.elems > 0 {
			n++
		}
		if top.typ == '{' {
			n += t.objMarkerLen()
		} else {
			n += t.arrMarkerLen()
		}
	}
	if t.topMarked(kind) {
		n++ // comma
		if t.stack[0].typ == '{' {
			n += t.objMarkerLen()
		} else {
			n += t.arrMarkerLen()
		}
	}
	return n
}

// topMarked reports whether the top-level container needs its own marker:
// when the cut's marker is not already one of its members.
func (t *truncator) topMarked(kind cutKind) bool {
	depth := len(t.stack)
	return depth > 1 || depth == 1 && kind == cutInString
}

func (t *truncator) appendMarker(dst []byte, typ byte) []byte {
	if typ == '{' {
		dst = append(dst, '"')
		dst = append(dst, TruncatedKey...)
		dst = append(dst, '"', ':')
		return strconv.AppendInt(dst, int64(t.orig), 10)
	}
	dst = append(dst, '"')
	dst = pgcopy.AppendMarker(dst, t.orig)
	return append(dst, '"')
}

func (t *truncator) appendSuffix(dst []byte, kind cutKind) []byte {
	depth := len(t.stack)
	if kind == cutInString {
		dst = pgcopy.AppendMarker(dst, t.orig)
		dst = append(dst, '"')
	} else {
		top := t.stack[depth-1]
		if top.elems > 0 {
			dst = append(dst, ',')
		}
		dst = t.appendMarker(dst, top.typ)
	}
	for j := depth - 1; j >= 0; j-- {
		if j == 0 && t.topMarked(kind) {
			dst = append(dst, ',')
			dst = t.appendMarker(dst, t.stack[0].typ)
		}
		if t.stack[j].typ == '{' {
			dst = append(dst, '}')
		} else {
			dst = append(dst, ']')
		}
	}
	return dst
}

// empty is the shortest document of doc's top-level type.
func (t *truncator) empty() string {
	i := skipSpace(t.doc, 0)
	if i >= len(t.doc) {
		return "null"
	}
	switch t.doc[i] {
	case '{':
		return "{}"
	case '[':
		return "[]"
	case '"':
		return `""`
	}
	return "null"
}
