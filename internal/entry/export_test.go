package entry

// Test hooks: the entry format's limits, and what Append chose.

const MaxRatio = maxRatio

// SetMaxTableSize lowers the table size bound for a test, which can then
// reach it without gigabytes of rows; the returned func restores it.
func SetMaxTableSize(n uint64) (restore func()) {
	old := maxTableSize
	maxTableSize = n
	return func() { maxTableSize = old }
}

// EntryTable is one table record of an entry, as its header says.
type EntryTable struct {
	Table      int
	Compressed bool
	Size       uint64 // the tuples' length
	Stored     uint64 // the bytes the record holds
}

// EntryTables lists an entry's table records.
func EntryTables(data []byte) ([]EntryTable, error) {
	_, r, err := splitEntry(data)
	if err != nil {
		return nil, err
	}
	var out []EntryTable
	for len(r) > 0 {
		t, err := readTable(&r)
		if err != nil {
			return nil, err
		}
		out = append(out, EntryTable{Table: t.table, Compressed: t.codec == codecS2, Size: t.size, Stored: uint64(len(t.data))})
	}
	return out, nil
}
