package rows

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// shrinkRow brings the row just written to table i within lim.MaxRow. Only
// text and jsonb values are cut, each to a common share chosen so that the row
// fits with the shortest values kept whole (the largest pay first); a cut
// text ends with pgcopy's marker, a cut document is cut by jsonb.Truncate.
// Numbers, times, ids and arrays are never cut, so a row whose arrays alone
// exceed the limit stays over it. This is the slow path: it re-reads the
// encoded row rather than taxing every row with bookkeeping.
func (b *Batch) shrinkRow(i int) {
	e := &b.enc[i]
	row := e.LastRow()
	kinds := b.layout().Table(i).Kinds
	fields, ok := pgcopy.SplitRow(b.fields[:0], row)
	b.fields = fields
	if !ok || len(fields) != len(kinds) {
		return // a malformed row: Encoder.Err reports it
	}
	fixed := 2 // field count
	sizes := b.sizes[:0]
	for j, f := range fields {
		fixed += 4 // length word
		switch {
		case f == nil:
		case kinds[j] == tables.KindText:
			sizes = append(sizes, len(f))
		case kinds[j] == tables.KindJSONB:
			fixed++ // jsonb version byte
			sizes = append(sizes, len(f)-1)
		default:
			fixed += len(f)
		}
	}
	b.sizes = sizes
	share := max(fairShare(sizes, b.lim.MaxRow-fixed), minShare)

	out := append(b.row[:0], row[:2]...)
	for j, f := range fields {
		switch {
		case f != nil && kinds[j] == tables.KindText && len(f) > share:
			pos := len(out)
			out = append(out, 0, 0, 0, 0)
			out = pgcopy.AppendCleanLimit(out, string(f), share)
			binary.BigEndian.PutUint32(out[pos:], uint32(len(out)-pos-4))
		case f != nil && kinds[j] == tables.KindJSONB && len(f)-1 > share:
			pos := len(out)
			out = append(out, 0, 0, 0, 0, f[0])
			out = jsonb.Truncate(out, f[1:], share)
			binary.BigEndian.PutUint32(out[pos:], uint32(len(out)-pos-4))
		default:
			out = pgcopy.AppendField(out, f)
		}
	}
	b.row = out
	e.ReplaceLastRow(out)
}

// fairShare returns the largest share such that the sizes, each capped at it,
// add up to at most budget (max-min fairness); MaxInt when all fit whole. It
// sorts sizes.
func fairShare(sizes []int, budget int) int {
	slices.Sort(sizes)
	for k, s := range sizes {
		left := len(sizes) - k
		if share := budget / left; s > share {
			return share
		}
		budget -= s
	}
	return math.MaxInt
}
