package jaegerstorage

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// message is what the codec reads and writes: each request type decodes
// itself, each response type encodes itself.
type message interface {
	unmarshal(b []byte) error
	marshal() ([]byte, error)
}

var errEncodeOnly = errors.New("jaegerstorage: message is encoded only")

// fields calls f with each field of b; f returns how many bytes of the
// value it consumed, or -1 to skip the field.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) (int, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		used, err := f(num, typ, b)
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		if used < 0 {
			used = protowire.ConsumeFieldValue(num, typ, b)
			if used < 0 {
				return protowire.ParseError(used)
			}
		}
		b = b[used:]
	}
	return nil
}

// bytesField decodes a length-delimited value.
func bytesField(typ protowire.Type, b []byte) ([]byte, int, error) {
	if typ != protowire.BytesType {
		return nil, 0, fmt.Errorf("wire type %d, want bytes", typ)
	}
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, 0, protowire.ParseError(n)
	}
	return v, n, nil
}

func varintField(typ protowire.Type, b []byte) (uint64, int, error) {
	if typ != protowire.VarintType {
		return 0, 0, fmt.Errorf("wire type %d, want varint", typ)
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, protowire.ParseError(n)
	}
	return v, n, nil
}

// zeroTimeSeconds is time.Time{} as a Timestamp: Jaeger's client (gogoproto
// stdtime) sends it for a bound it does not set.
const zeroTimeSeconds = -62135596800

// timestamp decodes a google.protobuf.Timestamp; the zero time.Time and the
// Unix epoch (the empty message) are no bound.
func timestamp(b []byte) (time.Time, error) {
	sec, nanos, err := secondsNanos(b)
	if err != nil || (sec == 0 && nanos == 0) || (sec == zeroTimeSeconds && nanos == 0) {
		return time.Time{}, err
	}
	return time.Unix(sec, int64(nanos)).UTC(), nil
}

// duration decodes a google.protobuf.Duration.
func duration(b []byte) (time.Duration, error) {
	sec, nanos, err := secondsNanos(b)
	if err != nil {
		return 0, err
	}
	if sec > math.MaxInt64/int64(time.Second)-1 || sec < 0 {
		return 0, fmt.Errorf("duration %ds out of range", sec)
	}
	return time.Duration(sec)*time.Second + time.Duration(nanos), nil
}

func secondsNanos(b []byte) (int64, int32, error) {
	var sec int64
	var nanos int32
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch num {
		case 1, 2:
			x, n, err := varintField(typ, v)
			if num == 1 {
				sec = int64(x)
			} else {
				nanos = int32(x)
			}
			return n, err
		}
		return -1, nil
	})
	return sec, nanos, err
}

func appendTimestamp(b []byte, num protowire.Number, t time.Time) []byte {
	var m []byte
	if s := t.Unix(); s != 0 {
		m = protowire.AppendTag(m, 1, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(s))
	}
	if n := t.Nanosecond(); n != 0 {
		m = protowire.AppendTag(m, 2, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(n))
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// ---------------------------------------------------------------- requests

// getTracesRequest is jaeger.storage.v2.GetTracesRequest.
type getTracesRequest struct {
	refs []traceread.TraceRef
}

func (m *getTracesRequest) marshal() ([]byte, error) { return nil, errEncodeOnly }

func (m *getTracesRequest) unmarshal(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		if num != 1 {
			return -1, nil
		}
		p, n, err := bytesField(typ, v)
		if err != nil {
			return 0, err
		}
		var ref traceread.TraceRef
		err = fields(p, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
			switch num {
			case 1:
				id, n, err := bytesField(typ, v)
				if err == nil && len(id) != len(ref.ID) {
					err = fmt.Errorf("trace_id of %d bytes, want %d", len(id), len(ref.ID))
				}
				copy(ref.ID[:], id)
				return n, err
			case 2, 3:
				ts, n, err := bytesField(typ, v)
				if err != nil {
					return 0, err
				}
				t, err := timestamp(ts)
				if num == 2 {
					ref.Start = t
				} else {
					ref.End = t
				}
				return n, err
			}
			return -1, nil
		})
		m.refs = append(m.refs, ref)
		return n, err
	})
}

// emptyRequest is a request without fields (GetServicesRequest).
type emptyRequest struct{}

func (*emptyRequest) marshal() ([]byte, error) { return nil, errEncodeOnly }
func (*emptyRequest) unmarshal(b []byte) error {
	return fields(b, func(protowire.Number, protowire.Type, []byte) (int, error) { return -1, nil })
}

// getOperationsRequest is jaeger.storage.v2.GetOperationsRequest.
type getOperationsRequest struct {
	service, spanKind string
}

func (*getOperationsRequest) marshal() ([]byte, error) { return nil, errEncodeOnly }
func (m *getOperationsRequest) unmarshal(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch num {
		case 1, 2:
			s, n, err := bytesField(typ, v)
			if num == 1 {
				m.service = string(s)
			} else {
				m.spanKind = string(s)
			}
			return n, err
		}
		return -1, nil
	})
}

// findTracesRequest is jaeger.storage.v2.FindTracesRequest (FindTraces and
// FindTraceIDs take the same), its TraceQueryParameters decoded.
type findTracesRequest struct {
	query traceread.TraceQuery
	// invalid is why the query cannot be run, for a well-formed message:
	// the handler refuses it as an invalid argument.
	invalid error
}

func (*findTracesRequest) marshal() ([]byte, error) { return nil, errEncodeOnly }
func (m *findTracesRequest) unmarshal(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		if num != 1 {
			return -1, nil
		}
		p, n, err := bytesField(typ, v)
		if err != nil {
			return 0, err
		}
		if err := unmarshalQuery(&m.query, p); errors.Is(err, errUnsupportedValue) {
			m.invalid = err
		} else if err != nil {
			return 0, err
		}
		return n, nil
	})
}

// unmarshalQuery decodes a TraceQueryParameters into q.
func unmarshalQuery(q *traceread.TraceQuery, b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch num {
		case 1, 2:
			s, n, err := bytesField(typ, v)
			if num == 1 {
				q.Service = string(s)
			} else {
				q.Operation = string(s)
			}
			return n, err
		case 3:
			kv, n, err := bytesField(typ, v)
			if err != nil {
				return 0, err
			}
			k, val, err := keyValue(kv)
			if err != nil {
				return 0, err
			}
			if q.Attributes == nil {
				q.Attributes = map[string]string{}
			}
			q.Attributes[k] = val
			return n, nil
		case 4, 5:
			ts, n, err := bytesField(typ, v)
			if err != nil {
				return 0, err
			}
			t, err := timestamp(ts)
			if num == 4 {
				q.StartMin = t
			} else {
				q.StartMax = t
			}
			return n, err
		case 6, 7:
			ds, n, err := bytesField(typ, v)
			if err != nil {
				return 0, err
			}
			d, err := duration(ds)
			if num == 6 {
				q.DurationMin = d
			} else {
				q.DurationMax = d
			}
			return n, err
		case 8:
			x, n, err := varintField(typ, v)
			q.Limit = int(int32(x))
			return n, err
		}
		return -1, nil
	})
}

// keyValue decodes a jaeger.storage.v2.KeyValue as the text a search
// compares (traceread.TraceQuery.Attributes).
func keyValue(b []byte) (string, string, error) {
	var key, val string
	var err error
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch num {
		case 1:
			s, n, err := bytesField(typ, v)
			key = string(s)
			return n, err
		case 2:
			av, n, err := bytesField(typ, v)
			if err != nil {
				return 0, err
			}
			val, err = anyValueText(av)
			return n, err
		}
		return -1, nil
	})
	return key, val, err
}

// errUnsupportedValue is a search attribute of a type the tables cannot be
// searched by (an array or a map).
var errUnsupportedValue = errors.New("attribute values to search by are strings, booleans, numbers or bytes")

// anyValueText is an AnyValue as the text ->> reads from the stored jsonb:
// bytes are stored base64-encoded.
func anyValueText(b []byte) (string, error) {
	var out string
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch num {
		case 1, 7:
			s, n, err := bytesField(typ, v)
			if num == 1 {
				out = string(s)
			} else {
				out = base64.StdEncoding.EncodeToString(s)
			}
			return n, err
		case 2:
			x, n, err := varintField(typ, v)
			out = strconv.FormatBool(x != 0)
			return n, err
		case 3:
			x, n, err := varintField(typ, v)
			out = strconv.FormatInt(int64(x), 10)
			return n, err
		case 4:
			if typ != protowire.Fixed64Type {
				return 0, fmt.Errorf("wire type %d, want fixed64", typ)
			}
			x, n := protowire.ConsumeFixed64(v)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			out = pcommon.NewValueDouble(math.Float64frombits(x)).AsString()
			return n, nil
		case 5, 6:
			return 0, errUnsupportedValue
		}
		return -1, nil
	})
	return out, err
}

// getDependenciesRequest is jaeger.storage.v2.GetDependenciesRequest.
type getDependenciesRequest struct {
	start, end time.Time
}

func (*getDependenciesRequest) marshal() ([]byte, error) { return nil, errEncodeOnly }
func (m *getDependenciesRequest) unmarshal(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch num {
		case 1, 2:
			ts, n, err := bytesField(typ, v)
			if err != nil {
				return 0, err
			}
			t, err := timestamp(ts)
			if num == 1 {
				m.start = t
			} else {
				m.end = t
			}
			return n, err
		}
		return -1, nil
	})
}

// ---------------------------------------------------------------- responses

// tracesData is opentelemetry.proto.trace.v1.TracesData, the same bytes as
// the ExportTraceServiceRequest pdata encodes.
type tracesData struct{ td ptrace.Traces }

var tracesMarshaler ptrace.ProtoMarshaler

func (m *tracesData) marshal() ([]byte, error) { return tracesMarshaler.MarshalTraces(m.td) }
func (m *tracesData) unmarshal(b []byte) error {
	td, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(b)
	m.td = td
	return err
}

// getServicesResponse is jaeger.storage.v2.GetServicesResponse.
type getServicesResponse struct{ services []string }

func (*getServicesResponse) unmarshal([]byte) error { return errEncodeOnly }
func (m *getServicesResponse) marshal() ([]byte, error) {
	var b []byte
	for _, s := range m.services {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	return b, nil
}

// getOperationsResponse is jaeger.storage.v2.GetOperationsResponse.
type getOperationsResponse struct{ ops []traceread.Operation }

func (*getOperationsResponse) unmarshal([]byte) error { return errEncodeOnly }
func (m *getOperationsResponse) marshal() ([]byte, error) {
	var b []byte
	for _, op := range m.ops {
		var o []byte
		o = protowire.AppendTag(o, 1, protowire.BytesType)
		o = protowire.AppendString(o, op.Name)
		o = appendString(o, 2, op.SpanKind)
		b = appendMessage(b, 1, o)
	}
	return b, nil
}

// findTraceIDsResponse is jaeger.storage.v2.FindTraceIDsResponse.
type findTraceIDsResponse struct{ found []traceread.FoundTrace }

func (*findTraceIDsResponse) unmarshal([]byte) error { return errEncodeOnly }
func (m *findTraceIDsResponse) marshal() ([]byte, error) {
	var b []byte
	for _, f := range m.found {
		var o []byte
		o = protowire.AppendTag(o, 1, protowire.BytesType)
		o = protowire.AppendBytes(o, f.ID[:])
		o = appendTimestamp(o, 2, f.Start)
		o = appendTimestamp(o, 3, f.End)
		b = appendMessage(b, 1, o)
	}
	return b, nil
}

// getDependenciesResponse is jaeger.storage.v2.GetDependenciesResponse.
type getDependenciesResponse struct{ deps []traceread.Dependency }

func (*getDependenciesResponse) unmarshal([]byte) error { return errEncodeOnly }
func (m *getDependenciesResponse) marshal() ([]byte, error) {
	var b []byte
	for _, d := range m.deps {
		var o []byte
		o = protowire.AppendTag(o, 1, protowire.BytesType)
		o = protowire.AppendString(o, d.Parent)
		o = protowire.AppendTag(o, 2, protowire.BytesType)
		o = protowire.AppendString(o, d.Child)
		if d.Calls != 0 {
			o = protowire.AppendTag(o, 3, protowire.VarintType)
			o = protowire.AppendVarint(o, d.Calls)
		}
		b = appendMessage(b, 1, o)
	}
	return b, nil
}
