package jsonb

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// checkJSON is what PostgreSQL's jsonb input needs from us: valid JSON,
// valid UTF-8 and no NUL (not even escaped).
func checkJSON(t testing.TB, out []byte) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("invalid JSON: %q", out)
	}
	if !utf8.Valid(out) {
		t.Fatalf("invalid UTF-8: %q", out)
	}
	if bytes.IndexByte(out, 0) >= 0 || bytes.Contains(out, []byte(`\u0000`)) {
		t.Fatalf("NUL in %q", out)
	}
}

// clean is the documented stand-in: NUL and each invalid UTF-8 byte become
// U+FFFD.
func clean(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == 0 || (r == utf8.RuneError && size == 1) {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`quote " and backslash \`, `"quote \" and backslash \\"`},
		{"nl\n cr\r tab\t", `"nl\n cr\r tab\t"`},
		{"ctl \x01 \x08 \x0c \x1f", `"ctl \u0001 \u0008 \u000c \u001f"`},
		{"del \x7f stays", "\"del \x7f stays\""},
		{"slash / and </script>", `"slash / and </script>"`},
		{"unicode é 🙂 \u2028 \u2029", "\"unicode é 🙂 \u2028 \u2029\""},
		{"nul \x00 end", "\"nul \uFFFD end\""},
		{"\x00", "\"\uFFFD\""},
		{"bad \xff\xfe", "\"bad \uFFFD\uFFFD\""},
		{"truncated \xe2\x82", "\"truncated \uFFFD\uFFFD\""},
		{"surrogate \xed\xa0\x80", "\"surrogate \uFFFD\uFFFD\uFFFD\""},
		{"real \uFFFD", "\"real \uFFFD\""},
		{"bad\xff\"quote", "\"bad\uFFFD\\\"quote\""},
	} {
		out := AppendString([]byte("x"), tc.in)
		require.Equal(t, "x"+tc.want, string(out), "%q", tc.in)
		checkJSON(t, out[1:])
		var back string
		require.NoError(t, json.Unmarshal(out[1:], &back))
		require.Equal(t, clean(tc.in), back, "%q reads back as its stand-in", tc.in)
	}
}

func TestAppendFloat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{3, "3.0"},
		{-7, "-7.0"},
		{3.25, "3.25"},
		{1.0 / 3, "0.3333333333333333"},
		{123456, "123456.0"},
		// jsonb folds a positive exponent into the digits, so these are
		// spelled out to keep their ".0".
		{1e6, "1000000.0"},
		{1.5e6, "1500000.0"},
		{-4e21, "-4000000000000000000000.0"},
		{1.2345678901234568e+17, "123456789012345680.0"},
		{1e-7, "1e-07"},
		{-2.5e-300, "-2.5e-300"},
		{math.SmallestNonzeroFloat64, "5e-324"},
		{math.NaN(), `"NaN"`},
		{math.Inf(1), `"Infinity"`},
		{math.Inf(-1), `"-Infinity"`},
	} {
		out := AppendFloat([]byte("x"), tc.in)
		require.Equal(t, "x"+tc.want, string(out), "%v", tc.in)
		checkJSON(t, out[1:])
	}
	max := string(AppendFloat(nil, math.MaxFloat64))
	require.True(t, strings.HasPrefix(max, "17976931348623157") && strings.HasSuffix(max, "000.0"), max)
	require.Len(t, max, 309+2)
}

// TestAppendFloatKeepsType checks, over many doubles, the property the
// storage relies on: the number parses back to the same double and, once
// jsonb has normalised it to plain digits, still has a fractional part (a
// decimal point, or a negative exponent, which numeric prints as decimals).
func TestAppendFloatKeepsType(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(f float64) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return
		}
		out := string(AppendFloat(nil, f))
		back, err := strconv.ParseFloat(out, 64)
		require.NoError(t, err, out)
		require.Equal(t, math.Float64bits(f), math.Float64bits(back), "%v -> %s", f, out)
		require.True(t, strings.Contains(out, ".") || strings.Contains(out, "e-"), "%v -> %s reads back as an integer", f, out)
		require.NotContains(t, out, "+", "%v -> %s: a positive exponent is folded away by numeric", f, out)
	}
	for range 20000 {
		check(math.Float64frombits(r.Uint64()))
		check(float64(r.Int64()))
		check(math.Trunc(r.NormFloat64() * math.Pow(10, float64(r.IntN(30)))))
	}
	for e := -330; e <= 310; e++ {
		check(math.Pow(10, float64(e)))
		check(-3 * math.Pow(10, float64(e)))
	}
}

func TestAppendValue(t *testing.T) {
	bs := pcommon.NewValueBytes()
	bs.Bytes().FromRaw([]byte{0, 1, 0xff})
	slice := pcommon.NewValueSlice()
	slice.Slice().AppendEmpty().SetInt(1)
	slice.Slice().AppendEmpty().SetDouble(1)
	slice.Slice().AppendEmpty()
	slice.Slice().AppendEmpty().SetEmptyMap().PutBool("b", false)
	m := pcommon.NewValueMap()
	m.Map().PutStr("k\x00", "v\xff")
	for _, tc := range []struct {
		name string
		in   pcommon.Value
		want string
	}{
		{"str", pcommon.NewValueStr(`a"b`), `"a\"b"`},
		{"int", pcommon.NewValueInt(-9223372036854775808), `-9223372036854775808`},
		{"double", pcommon.NewValueDouble(2), `2.0`},
		{"nan", pcommon.NewValueDouble(math.NaN()), `"NaN"`},
		{"bool", pcommon.NewValueBool(true), `true`},
		{"bytes", bs, `"AAH/"`},
		{"empty bytes", pcommon.NewValueBytes(), `""`},
		{"empty", pcommon.NewValueEmpty(), `null`},
		{"slice", slice, `[1,1.0,null,{"b":false}]`},
		{"empty slice", pcommon.NewValueSlice(), `[]`},
		{"map", m, "{\"k\uFFFD\":\"v\uFFFD\"}"},
		{"empty map", pcommon.NewValueMap(), `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := AppendValue(nil, tc.in)
			require.Equal(t, tc.want, string(out))
			checkJSON(t, out)
		})
	}
}

func TestAppendMapValidJSON(t *testing.T) {
	m := pcommon.NewMap()
	m.PutStr("", "empty key")
	m.PutStr("\x00\xff\"\\\n", "dirty key")
	m.PutStr("s", "\x00\x01\xc3")
	m.PutInt("i", math.MaxInt64)
	m.PutDouble("d", -1e300)
	m.PutDouble("inf", math.Inf(1))
	m.PutBool("b", false)
	m.PutEmpty("e")
	m.PutEmptyBytes("by").FromRaw([]byte("\x00"))
	in := m.PutEmptyMap("m")
	in.PutEmptySlice("s").AppendEmpty().SetEmptySlice().AppendEmpty().SetStr("deep")
	out := AppendMap(nil, m)
	checkJSON(t, out)

	var back map[string]any
	d := json.NewDecoder(bytes.NewReader(out))
	d.UseNumber()
	require.NoError(t, d.Decode(&back))
	require.Len(t, back, m.Len(), "no key lost or merged")
	require.Equal(t, json.Number("9223372036854775807"), back["i"])
	require.Equal(t, "empty key", back[""])
	require.Equal(t, "dirty key", back["\uFFFD\uFFFD\"\\\n"])
	require.Nil(t, back["e"])
	require.Equal(t, "AA==", back["by"])

	require.Equal(t, "{}", string(AppendMap(nil, pcommon.NewMap())))
}

// nest wraps leaf in n levels of maps (or slices), outermost first.
func nest(n int, slices bool) pcommon.Value {
	root := pcommon.NewValueEmpty()
	v := root
	for i := 0; i < n; i++ {
		if slices && i%2 == 1 {
			v = v.SetEmptySlice().AppendEmpty()
		} else {
			v = v.SetEmptyMap().PutEmpty("k")
		}
	}
	v.SetStr("leaf")
	return root
}

// maxNesting is the deepest bracket nesting in a JSON document.
func maxNesting(doc []byte) int {
	d := json.NewDecoder(bytes.NewReader(doc))
	depth, deepest := 0, 0
	for {
		tok, err := d.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

func TestMaxDepth(t *testing.T) {
	for _, slices := range []bool{false, true} {
		for _, n := range []int{1, MaxDepth - 1, MaxDepth, MaxDepth + 1, 10 * MaxDepth} {
			out := AppendValue(nil, nest(n, slices))
			checkJSON(t, out)
			require.Equal(t, min(n, MaxDepth), maxNesting(out), "n=%d slices=%v", n, slices)
			require.Equal(t, n > MaxDepth, bytes.Contains(out, []byte(TooDeep)), "n=%d slices=%v", n, slices)
			require.Equal(t, n <= MaxDepth, bytes.Contains(out, []byte(`"leaf"`)), "n=%d slices=%v", n, slices)
		}
	}
	// AppendMap counts its own object as the first level, as AppendValue does.
	v := nest(MaxDepth+1, false)
	out := AppendMap(nil, v.Map())
	checkJSON(t, out)
	require.Equal(t, MaxDepth, maxNesting(out))
	require.Contains(t, string(out), TooDeep)
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\x00", "\xff\xfe", "\"\\\n\t\x01\x7f", "é🙂\u2028", "\xed\xa0\x80", "\xe2\x82"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendString(nil, s)
		checkJSON(t, out)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		if back != clean(s) {
			t.Fatalf("%q read back as %q, want %q", s, back, clean(s))
		}
	})
}

// FuzzAppendValue builds a nested value of every type from the fuzzer's
// inputs; the document must always be valid, NUL-free UTF-8 JSON whose numbers
// keep their int or double type.
func FuzzAppendValue(f *testing.F) {
	f.Add("key", "str", int64(-1), 3.0, []byte{0, 0xff}, true, uint8(3))
	f.Add("\x00", "\xff", int64(math.MinInt64), math.NaN(), []byte{}, false, uint8(0))
	f.Add("", "\"\\", int64(0), 1e21, []byte(nil), true, uint8(200))
	f.Add("k\xc3", "v\x00", int64(math.MaxInt64), -5e-324, []byte("x"), false, uint8(MaxDepth))
	f.Fuzz(func(t *testing.T, key, s string, i int64, d float64, b []byte, flag bool, depth uint8) {
		root := pcommon.NewValueMap()
		m := root.Map()
		for n := 0; n < int(depth); n++ {
			if flag && n%3 == 2 {
				m = m.PutEmptySlice(key).AppendEmpty().SetEmptyMap()
			} else {
				m = m.PutEmptyMap(key)
			}
		}
		m.PutStr("s", s)
		m.PutInt("i", i)
		m.PutDouble("d", d)
		m.PutBool("b", flag)
		m.PutEmptyBytes("by").FromRaw(b)
		m.PutEmpty("e")
		m.PutStr(key, s)
		sl := m.PutEmptySlice("sl")
		sl.AppendEmpty().SetInt(i)
		sl.AppendEmpty().SetDouble(d)
		sl.AppendEmpty().SetStr(key)

		out := AppendValue(nil, root)
		checkJSON(t, out)

		n := string(AppendFloat(nil, d))
		if !math.IsNaN(d) && !math.IsInf(d, 0) {
			if !strings.Contains(n, ".") && !strings.Contains(n, "e-") {
				t.Fatalf("double %v encoded as %s reads back as an integer", d, n)
			}
			back, err := strconv.ParseFloat(n, 64)
			if err != nil || math.Float64bits(back) != math.Float64bits(d) {
				t.Fatalf("double %v encoded as %s reads back as %v (%v)", d, n, back, err)
			}
		}
		if got := string(AppendValue(nil, pcommon.NewValueInt(i))); got != strconv.FormatInt(i, 10) {
			t.Fatalf("int %d encoded as %s", i, got)
		}
	})
}

// BenchmarkAppendString is the hot loop of every row: attribute keys and
// values as real spans carry them (URLs, SQL, user agents), all plain ASCII.
func BenchmarkAppendString(b *testing.B) {
	strs := []string{"http.request.method", "POST", "url.full",
		"https://shop.example.com/api/v2/carts/1042/checkout?currency=EUR&locale=de-DE&promo=WINTER2025&ref=a1b2c3a1b2c3",
		"user_agent.original", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
		"db.query.text", "SELECT c.id, c.customer_id, c.currency, c.created_at FROM carts c JOIN cart_items i ON i.cart_id = c.id WHERE c.id = $1 AND c.status = 'open'"}
	n := 0
	for _, s := range strs {
		n += len(s)
	}
	b.SetBytes(int64(n))
	var dst []byte
	for range b.N {
		dst = dst[:0]
		for _, s := range strs {
			dst = AppendString(dst, s)
		}
	}
}

// BenchmarkAppendStringLong is the bulk of loadgen's spans: prompts,
// completions and retrieved documents, kilobytes of plain ASCII prose.
func BenchmarkAppendStringLong(b *testing.B) {
	s := strings.Repeat("the model returned a completion of the prompt within its context window, ", 55)
	b.SetBytes(int64(len(s)))
	var dst []byte
	for range b.N {
		dst = AppendString(dst[:0], s)
	}
}

// AppendString's 32-byte blocks find every byte that needs escaping or
// checking, whatever its position in a block.
func TestAppendStringBlocks(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	for pos := range 32 {
		for c := range 256 {
			w := []byte("abcdefghijklmnopqrstuvwxyz012345abcdefghijklmnopqrstuvwxyz012345")
			w[pos] = byte(c)
			got := AppendString(nil, string(w))
			want := []byte(`"` + string(w) + `"`)
			if !plain(byte(c)) {
				// The byte-at-a-time path's output for it.
				want = append(AppendString(nil, string(w[:pos]))[:pos+1], AppendString(nil, string(w[pos:]))[1:]...)
			}
			if plain(byte(c)) != bytes.Equal(got, []byte(`"`+string(w)+`"`)) || !bytes.Equal(got, want) {
				t.Fatalf("byte %#x at %d: %q, want %q", c, pos, got, want)
			}
		}
	}
}

// plain8 agrees with the byte-by-byte rule for every byte value at every
// position of a word, and for words of mixed bytes.
func TestPlain8(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	for pos := range 8 {
		for c := range 256 {
			w := []byte("abcdefgh")
			w[pos] = byte(c)
			if got := plain8(binary.LittleEndian.Uint64(w)); got != plain(byte(c)) {
				t.Fatalf("byte %#x at %d: plain8 = %v", c, pos, got)
			}
		}
	}
	for _, w := range []string{"        ", "~~~~~~~~", "\x1f\x20\x21!!!!!", "!!!!!!\x7f\x80", "\"\"\"\"\"\"\"\"", "\x00\x00\x00\x00\x00\x00\x00\x00"} {
		want := true
		for i := range 8 {
			want = want && plain(w[i])
		}
		if got := plain8(binary.LittleEndian.Uint64([]byte(w))); got != want {
			t.Fatalf("%q: plain8 = %v, want %v", w, got, want)
		}
	}
}

// Objects are written with their keys in jsonb's order (shorter first, then
// bytewise), so that PostgreSQL's parser finds them sorted; a repeated key's
// entries keep their order, so the last still wins. Unordered, skipped keys,
// nested maps and maps over orderedEntries are checked too.
func TestAppendMapKeyOrder(t *testing.T) {
	keys := func(doc []byte) []string {
		t.Helper()
		checkJSON(t, doc)
		d := json.NewDecoder(bytes.NewReader(doc))
		var out []string
		depth := 0
		expectKey := false
		for {
			tok, err := d.Token()
			if err != nil {
				return out
			}
			switch tok {
			case json.Delim('{'):
				depth++
				expectKey = depth == 1
				continue
			case json.Delim('}'), json.Delim('['), json.Delim(']'):
				if tok == json.Delim('}') {
					depth--
				}
				if tok == json.Delim('[') {
					depth++
				}
				if tok == json.Delim(']') {
					depth--
				}
				expectKey = depth == 1
				continue
			}
			if depth == 1 && expectKey {
				out = append(out, tok.(string))
				expectKey = false
			} else if depth == 1 {
				expectKey = true
			}
		}
	}

	m := pcommon.NewMap()
	m.PutStr("service.name", "a")
	m.PutInt("zz", 1)
	m.PutStr("b", "c")
	m.PutStr("ab", "d")
	m.PutStr("aa", "e")
	m.PutEmptyMap("nested").PutStr("yyy", "f")
	n, _ := m.Get("nested")
	n.Map().PutStr("x", "g")
	require.Equal(t, []string{"b", "aa", "ab", "zz", "nested", "service.name"}, keys(AppendMap(nil, m)))
	require.Equal(t, `{"x":"g","yyy":"f"}`, string(AppendMap(nil, n.Map())), "nested objects are ordered too")
	require.Equal(t, []string{"service.name", "zz", "b", "ab", "aa", "nested"}, keys(Encoder{Unordered: true}.AppendMap(nil, m)), "Unordered keeps the map's order")
	require.Equal(t, []string{"b", "aa", "nested", "service.name"}, keys(Encoder{}.AppendMapSkip(nil, m, []string{"zz", "ab"})))

	// A repeated key (an OTLP decoder keeps both entries): its entries stay
	// in their order, so jsonb still keeps the last one.
	ld, err := (&plog.JSONUnmarshaler{}).UnmarshalLogs([]byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"attributes":[` +
		`{"key":"k","value":{"stringValue":"first"}},{"key":"long.key","value":{"stringValue":"x"}},{"key":"k","value":{"stringValue":"second"}}]}]}]}]}`))
	require.NoError(t, err)
	dup := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
	require.Equal(t, 3, dup.Len())
	require.Equal(t, `{"k":"first","k":"second","long.key":"x"}`, string(AppendMap(nil, dup)))

	// Over orderedEntries entries the map's own order is kept.
	big := pcommon.NewMap()
	var want []string
	for i := orderedEntries; i >= 0; i-- {
		k := strings.Repeat("k", i+1)
		big.PutInt(k, int64(i))
		want = append(want, k)
	}
	require.Equal(t, want, keys(AppendMap(nil, big)))
	big.Remove(want[0])
	require.Equal(t, orderedEntries, big.Len())
	slicesReverse(want)
	require.Equal(t, want[:orderedEntries], keys(AppendMap(nil, big)), "at orderedEntries entries the keys are ordered")
}

func slicesReverse(s []string) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
