package config

import (
	"encoding/base64"
	"fmt"
	"math"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/perfettoipc"
)

// data_sources[i].perfetto_config: the Perfetto DataSourceConfig of a
// data source that Perfetto producers serve, written in the session's
// YAML (or TOML, JSON) with the proto's field names. It is checked against
// tracepipe's schema (perfettoipc/perfetto_config.proto) with field paths,
// serialized, and sent to each producer in SetupDataSource and
// StartDataSource, with the fields the service sets itself (name,
// target_buffer, tracing_session_id, ...).
//
// Only the data source's own configs (DataSourceConfig fields 100 and up:
// ftrace_config, sys_stats_config, ...) belong here: the others are
// tracepipe's keys of the same entry or the service's to set. A config the
// schema declares as bytes (one tracepipe does not model: chrome_config,
// heapprofd_config, ...) is given as base64 of its serialized message.

// perfettoConfigOwnField says, for a DataSourceConfig field below 100, why
// it has no place in perfetto_config.
func perfettoConfigOwnField(name protoreflect.Name) string {
	switch name {
	case "name":
		return "the data source's name is data_sources[i].name"
	case "target_buffer", "target_buffer_name":
		return "the buffer is data_sources[i].target_buffer or target_buffer_name"
	case "buffer_exhausted_policy":
		return "use data_sources[i].buffer_exhausted_policy"
	case "protovm_config":
		return "use data_sources[i].protovm"
	case "priority_boost":
		return "not supported by tracepipe"
	}
	return "the service sets it for each session"
}

// encodePerfettoConfig checks data_sources[i].perfetto_config (at path)
// and returns the serialized DataSourceConfig it describes; problems go
// to k with their field paths.
func encodePerfettoConfig(k *checker, path string, m map[string]any) []byte {
	msg := &perfettoipc.DataSourceConfig{}
	before := len(k.problems)
	fillMessage(k, path, m, msg.ProtoReflect(), true)
	if len(k.problems) > before {
		return nil
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		k.bad(path, "%v", err)
		return nil
	}
	return b
}

// fillMessage sets the fields of msg from the map m, naming each problem
// by its path. top: m is the DataSourceConfig itself.
func fillMessage(k *checker, path string, m map[string]any, msg protoreflect.Message, top bool) {
	desc := msg.Descriptor()
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	oneofs := map[protoreflect.FullName]string{}
	for _, key := range keys {
		p := joinPath(path, key)
		fd := desc.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			k.bad(p, "unknown field (%s has: %s)", desc.Name(), fieldNames(desc))
			continue
		}
		if top && fd.Number() < 100 {
			k.bad(p, "not a data-source config: %s", perfettoConfigOwnField(fd.Name()))
			continue
		}
		if o := fd.ContainingOneof(); o != nil {
			if other, dup := oneofs[o.FullName()]; dup {
				k.bad(p, "%s and %s are alternatives (%s): give one", other, key, o.Name())
				continue
			}
			oneofs[o.FullName()] = key
		}
		v := m[key]
		if v == nil {
			continue // "key:" with nothing: unset
		}
		switch {
		case fd.IsList():
			list, ok := asList(v)
			if !ok {
				k.bad(p, "want a list (repeated %s), got %s", kindName(fd), describe(v))
				continue
			}
			l := msg.Mutable(fd).List()
			for i, e := range list {
				ep := fmt.Sprintf("%s[%d]", p, i)
				if fd.Message() != nil {
					em, ok := asMap(e)
					if !ok {
						k.bad(ep, "want a map (%s), got %s", fd.Message().Name(), describe(e))
						continue
					}
					ev := l.NewElement()
					fillMessage(k, ep, em, ev.Message(), false)
					l.Append(ev)
					continue
				}
				if sv, ok := scalarValue(k, ep, fd, e); ok {
					l.Append(sv)
				}
			}
		case fd.IsMap():
			k.bad(p, "map fields are not supported")
		case fd.Message() != nil:
			sub, ok := asMap(v)
			if !ok {
				k.bad(p, "want a map (%s), got %s", fd.Message().Name(), describe(v))
				continue
			}
			fillMessage(k, p, sub, msg.Mutable(fd).Message(), false)
		default:
			if sv, ok := scalarValue(k, p, fd, v); ok {
				msg.Set(fd, sv)
			}
		}
	}
}

// scalarValue converts one YAML scalar to the field's kind.
func scalarValue(k *checker, p string, fd protoreflect.FieldDescriptor, v any) (protoreflect.Value, bool) {
	v = normalizeFree(v)
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if b, ok := v.(bool); ok {
			return protoreflect.ValueOfBool(b), true
		}
	case protoreflect.StringKind:
		if s, ok := v.(string); ok {
			return protoreflect.ValueOfString(s), true
		}
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if !ok {
			break
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			k.bad(p, "want base64 of the serialized %s (tracepipe's schema does not model it, so it is forwarded as bytes): %v", fd.Name(), err)
			return protoreflect.Value{}, false
		}
		if fd.Number() >= 100 {
			if err := wire.Walk(b, func(wire.Field) error { return nil }); err != nil {
				k.bad(p, "the base64 bytes are not a serialized protobuf message: %v", err)
				return protoreflect.Value{}, false
			}
		}
		return protoreflect.ValueOfBytes(b), true
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		switch x := v.(type) {
		case string:
			if ev := vals.ByName(protoreflect.Name(x)); ev != nil {
				return protoreflect.ValueOfEnum(ev.Number()), true
			}
			k.bad(p, "%q is not a value of %s (%s)", x, fd.Enum().Name(), enumNames(fd.Enum()))
			return protoreflect.Value{}, false
		case int:
			if x >= math.MinInt32 && x <= math.MaxInt32 {
				if ev := vals.ByNumber(protoreflect.EnumNumber(x)); ev != nil {
					return protoreflect.ValueOfEnum(ev.Number()), true
				}
			}
			k.bad(p, "%d is not a value of %s", x, fd.Enum().Name())
			return protoreflect.Value{}, false
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch x := v.(type) {
		case float64:
			if fd.Kind() == protoreflect.FloatKind {
				return protoreflect.ValueOfFloat32(float32(x)), true
			}
			return protoreflect.ValueOfFloat64(x), true
		case int:
			if fd.Kind() == protoreflect.FloatKind {
				return protoreflect.ValueOfFloat32(float32(x)), true
			}
			return protoreflect.ValueOfFloat64(float64(x)), true
		}
	default:
		return intValue(k, p, fd, v)
	}
	k.bad(p, "want %s, got %s", kindName(fd), describe(v))
	return protoreflect.Value{}, false
}

// intValue converts an integer to an integral field's kind, in range.
func intValue(k *checker, p string, fd protoreflect.FieldDescriptor, v any) (protoreflect.Value, bool) {
	var signed int64
	var unsigned uint64
	neg, ok := false, true
	switch x := v.(type) {
	case int:
		signed, unsigned, neg = int64(x), uint64(x), x < 0
	case int64:
		signed, unsigned, neg = x, uint64(x), x < 0
	case uint64:
		signed, unsigned = int64(x), x
		if x > math.MaxInt64 {
			signed = math.MaxInt64 // only a uint64 field takes it
		}
	default:
		ok = false
	}
	if !ok {
		k.bad(p, "want %s, got %s", kindName(fd), describe(v))
		return protoreflect.Value{}, false
	}
	outOfRange := func(lo, hi string) (protoreflect.Value, bool) {
		k.bad(p, "%v is out of range for %s (%s..%s)", v, fd.Kind(), lo, hi)
		return protoreflect.Value{}, false
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if neg && signed < math.MinInt32 || !neg && unsigned > math.MaxInt32 {
			return outOfRange("-2147483648", "2147483647")
		}
		return protoreflect.ValueOfInt32(int32(signed)), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if !neg && unsigned > math.MaxInt64 {
			return outOfRange("-9223372036854775808", "9223372036854775807")
		}
		return protoreflect.ValueOfInt64(signed), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if neg || unsigned > math.MaxUint32 {
			return outOfRange("0", "4294967295")
		}
		return protoreflect.ValueOfUint32(uint32(unsigned)), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if neg {
			return outOfRange("0", "18446744073709551615")
		}
		return protoreflect.ValueOfUint64(unsigned), true
	}
	k.bad(p, "fields of kind %s are not supported", fd.Kind())
	return protoreflect.Value{}, false
}

func kindName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BytesKind:
		return "a base64 string"
	case protoreflect.EnumKind:
		return "a value of " + string(fd.Enum().Name()) + " (name or number)"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "a map (" + string(fd.Message().Name()) + ")"
	}
	return "an integer (" + fd.Kind().String() + ")"
}

// fieldNames lists a message's fields, for an unknown-field message;
// DataSourceConfig's are its data-source configs only.
func fieldNames(desc protoreflect.MessageDescriptor) string {
	var names []string
	fs := desc.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		if desc.FullName() == DataSourceConfigDesc().FullName() && fd.Number() < 100 {
			continue
		}
		names = append(names, string(fd.Name()))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func enumNames(ed protoreflect.EnumDescriptor) string {
	vs := ed.Values()
	if vs.Len() > 12 {
		return fmt.Sprintf("%d values: %s, %s, ... %s", vs.Len(), vs.Get(0).Name(), vs.Get(1).Name(), vs.Get(vs.Len()-1).Name())
	}
	var names []string
	for i := range vs.Len() {
		names = append(names, string(vs.Get(i).Name()))
	}
	return strings.Join(names, ", ")
}
