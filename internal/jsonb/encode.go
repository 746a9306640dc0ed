package jsonb

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
)

// MaxDepth bounds the nesting of maps and arrays; deeper values are replaced by
// the string TooDeep so that a hostile payload cannot exhaust the server's stack.
const MaxDepth = 64

// TooDeep stands in for a value nested deeper than MaxDepth.
const TooDeep = "[postgrescopy: nested too deep]"

// Encoder encodes with a bound on each string. The zero Encoder has none, and
// the package-level functions use it.
type Encoder struct {
	// MaxValue, when positive, bounds each string (keys too) and each bytes
	// value's base64 text to MaxValue bytes, the cut ones ending with
	// pgcopy's truncation marker; it counts the string as stored, after the
	// U+FFFD replacements and before JSON escaping, which jsonb undoes.
	MaxValue int
	// Unordered writes an object's keys in the map's order instead of
	// jsonb's (see appendObject), for a row that is cut to a size limit:
	// what a cut keeps then does not depend on that order.
	Unordered bool
}

// AppendMap appends m as a JSON object.
func AppendMap(dst []byte, m pcommon.Map) []byte { return Encoder{}.AppendMap(dst, m) }

// AppendValue appends v as JSON: strings, numbers, booleans, objects and arrays
// as themselves, bytes as a base64 string, an empty value as null.
func AppendValue(dst []byte, v pcommon.Value) []byte { return Encoder{}.AppendValue(dst, v) }

// AppendString appends s as a JSON string. NUL, which jsonb refuses even
// escaped, and invalid UTF-8 become U+FFFD.
func AppendString(dst []byte, s string) []byte { return appendString(dst, s) }

// AppendMap appends m as a JSON object.
func (e Encoder) AppendMap(dst []byte, m pcommon.Map) []byte {
	return e.appendMap(dst, m, 0)
}

// AppendValue is the package-level AppendValue under e's bound.
func (e Encoder) AppendValue(dst []byte, v pcommon.Value) []byte {
	return e.appendValue(dst, v, 0)
}

// AppendString is the package-level AppendString under e's bound.
func (e Encoder) AppendString(dst []byte, s string) []byte {
	if e.MaxValue <= 0 || len(s)*3 <= e.MaxValue || len(s) <= e.MaxValue && pgcopy.IsClean(s) {
		// s fits even if every byte is replaced, or needs no replacing: the
		// common case costs a comparison.
		return appendString(dst, s)
	}
	// Rare: clean and cut first, then escape what is kept.
	return appendString(dst, string(pgcopy.AppendCleanLimit(nil, s, e.MaxValue)))
}

// appendBytes appends b as a base64 JSON string, cut to e.MaxValue bytes of
// base64 text (a whole number of 4-character groups) plus the marker.
func (e Encoder) appendBytes(dst []byte, b []byte) []byte {
	dst = append(dst, '"')
	if n := base64.StdEncoding.EncodedLen(len(b)); e.MaxValue > 0 && n > e.MaxValue {
		keep := max(e.MaxValue-pgcopy.MarkerLen(n), 0) / 4 * 3
		dst = base64.StdEncoding.AppendEncode(dst, b[:keep])
		dst = pgcopy.AppendMarker(dst, n)
		return append(dst, '"')
	}
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

func (e Encoder) appendMap(dst []byte, m pcommon.Map, depth int) []byte {
	return e.appendObject(dst, m, nil, 0, depth)
}

// entry is one key and value of a map, for writing its keys in jsonb order.
type entry struct {
	k string
	v pcommon.Value
}

// orderedEntries is how many entries a map may have for its keys to be
// ordered by an insertion sort over a stack array; larger maps are written
// in their own order (PostgreSQL sorts them, as it always did).
const orderedEntries = 32

// jsonbCompare orders keys as jsonb stores an object's keys: shorter first,
// then bytewise. PostgreSQL sorts every object's keys so while it parses a
// jsonb value; keys that arrive in that order are only checked (its sort first
// tests whether the input is already sorted). Measured with loadgen spans:
// ~8% less PostgreSQL CPU per row (perf: the sort was ~6% of it). A key that
// cleaning or a length limit changes may end up out of order: PostgreSQL then
// sorts, as it would anyway.
func jsonbCompare(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// appendObject appends m as a JSON object, leaving out the entries whose key
// is in skip and, when long is positive, the string values longer than long
// bytes (IsLong), with its keys in jsonb order unless e.Unordered. A
// repeated key's entries keep their order (the sort is stable), so the last
// one still wins in jsonb.
func (e Encoder) appendObject(dst []byte, m pcommon.Map, skip []string, long, depth int) []byte {
	n := m.Len()
	if e.Unordered || n < 2 || n > orderedEntries {
		dst = append(dst, '{')
		first := true
		for k, v := range m.All() {
			if slices.Contains(skip, k) || IsLong(v, long) {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = e.appendEntry(dst, k, v, depth)
		}
		return append(dst, '}')
	}
	if n <= 8 {
		var es [8]entry
		var order [8]uint8
		return e.appendOrdered(dst, m, skip, long, depth, es[:], order[:])
	}
	var es [orderedEntries]entry
	var order [orderedEntries]uint8
	return e.appendOrdered(dst, m, skip, long, depth, es[:], order[:])
}

// appendOrdered is appendObject's jsonb-ordered path, with room for m's
// entries in es and order (stack arrays sized by the caller: zeroing a
// large one for a small map cost more than sorting it).
func (e Encoder) appendOrdered(dst []byte, m pcommon.Map, skip []string, long, depth int, es []entry, order []uint8) []byte {
	i := 0
	for k, v := range m.All() {
		if slices.Contains(skip, k) || IsLong(v, long) {
			continue
		}
		es[i] = entry{k, v}
		// Insertion sort of positions, not entries: few moves.
		j := i
		for ; j > 0 && jsonbCompare(k, es[order[j-1]].k) < 0; j-- {
			order[j] = order[j-1]
		}
		order[j] = uint8(i)
		i++
	}
	dst = append(dst, '{')
	for j, o := range order[:i] {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = e.appendEntry(dst, es[o].k, es[o].v, depth)
	}
	return append(dst, '}')
}

// appendEntry appends one object member, k and its value at depth+1.
func (e Encoder) appendEntry(dst []byte, k string, v pcommon.Value, depth int) []byte {
	dst = e.AppendString(dst, k)
	dst = append(dst, ':')
	return e.appendValue(dst, v, depth+1)
}

func (e Encoder) appendValue(dst []byte, v pcommon.Value, depth int) []byte {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return e.AppendString(dst, v.Str())
	case pcommon.ValueTypeInt:
		return strconv.AppendInt(dst, v.Int(), 10)
	case pcommon.ValueTypeDouble:
		return AppendFloat(dst, v.Double())
	case pcommon.ValueTypeBool:
		return strconv.AppendBool(dst, v.Bool())
	case pcommon.ValueTypeBytes:
		return e.appendBytes(dst, v.Bytes().AsRaw())
	case pcommon.ValueTypeMap:
		if depth >= MaxDepth {
			return appendString(dst, TooDeep)
		}
		return e.appendMap(dst, v.Map(), depth)
	case pcommon.ValueTypeSlice:
		if depth >= MaxDepth {
			return appendString(dst, TooDeep)
		}
		s := v.Slice()
		dst = append(dst, '[')
		for i := 0; i < s.Len(); i++ {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = e.appendValue(dst, s.At(i), depth+1)
		}
		return append(dst, ']')
	default:
		return append(dst, "null"...)
	}
}

// AppendFloat appends f as a JSON number that keeps its floating-point type:
// an integral value gets ".0" (jsonb keeps the scale, so 3.0 reads back as
// 3.0, not 3). NaN and the infinities, which JSON has no number for, become
// the strings "NaN", "Infinity" and "-Infinity".
func AppendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'g', -1, 64)
	if bytes.IndexByte(dst[start:], '+') >= 0 {
		// jsonb stores numbers as numeric, which folds a positive exponent
		// into the digits: 3e+06 reads back as 3000000, an integer. Spell
		// such values out so that the ".0" below marks them as doubles.
		dst = strconv.AppendFloat(dst[:start], f, 'f', -1, 64)
	}
	for _, c := range dst[start:] {
		if c == '.' || c == 'e' || c == 'n' || c == 'N' {
			return dst
		}
	}
	return append(dst, '.', '0')
}

const hex = "0123456789abcdef"

func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	// A read-only view of s, for 8-byte loads; nothing writes to it.
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	start := 0
	for i := 0; i < len(s); {
		// Skip plain bytes 32 then 8 at a time: attribute values (URLs,
		// SQL, user agents, prompts) are long runs of them, and this loop
		// was the exporter's hottest in profiles. The four words of a block
		// are tested at once, so their tests overlap in the CPU.
		for i+32 <= len(s) {
			w := b[i : i+32 : i+32]
			if needs8(binary.LittleEndian.Uint64(w))|needs8(binary.LittleEndian.Uint64(w[8:]))|
				needs8(binary.LittleEndian.Uint64(w[16:]))|needs8(binary.LittleEndian.Uint64(w[24:])) != 0 {
				break
			}
			i += 32
		}
		for i+8 <= len(s) && plain8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case 0:
				dst = append(dst, "\uFFFD"...)
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// SWAR constants: one bit or byte value in each of 8 lanes.
const (
	lanes1   = 0x0101010101010101
	lanesTop = 0x8080808080808080
)

// plain8 reports whether none of the 8 bytes of x needs escaping or UTF-8
// checking: each is at least 0x20, below 0x80, and neither '"' nor '\\'.
func plain8(x uint64) bool { return needs8(x) == 0 }

// needs8 has a lane's top bit set where a byte of x is not plain, and none
// when all are: the classic has-less/has-zero bit tricks, exact for the
// answer "some byte matches". A lane's borrow comes only from a lower lane
// that matched. Each trick's usual "&^ x" is left out: it clears only lanes
// whose byte is 0x80 or more, which x itself flags.
func needs8(x uint64) uint64 {
	ctl := x - lanes1*0x20               // a byte below 0x20
	q := (x ^ lanes1*'"') - lanes1       // a '"'
	bs := (x ^ lanes1*'\\') - lanes1     // a '\\'
	return (ctl | q | bs | x) & lanesTop // x: a byte of 0x80 or more
}

// AppendMapSkip appends m as a JSON object without the top-level entries
// whose key is in skip (every entry of a repeated key), for a promoted
// attribute that its column holds instead.
func (e Encoder) AppendMapSkip(dst []byte, m pcommon.Map, skip []string) []byte {
	return e.appendObject(dst, m, skip, 0, 0)
}

// AppendMapSplit is AppendMapSkip that also leaves out the top-level string
// values longer than long bytes (long > 0), which the caller stores apart:
// PostgreSQL lexes a jsonb string a character at a time, a text value it
// only validates.
func (e Encoder) AppendMapSplit(dst []byte, m pcommon.Map, skip []string, long int) []byte {
	return e.appendObject(dst, m, skip, long, 0)
}

// IsLong reports whether v is a string value longer than long bytes, long
// positive: one that AppendMapSplit leaves out.
func IsLong(v pcommon.Value, long int) bool {
	return long > 0 && v.Type() == pcommon.ValueTypeStr && len(v.Str()) > long
}
