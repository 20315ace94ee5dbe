package tracefile

import (
	"testing"

	"github.com/tracepipe/tracepipe/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// fieldsOf lists a message's fields by number (the last occurrence wins).
func fieldsOf(t *testing.T, b []byte) map[protowire.Number]wire.Field {
	t.Helper()
	m := map[protowire.Number]wire.Field{}
	if err := wire.Walk(b, func(f wire.Field) error { m[f.Num] = f; return nil }); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAppendSystemInfo(t *testing.T) {
	pkt := AppendSystemInfo(nil, &SystemInfo{HasUname: true, Sysname: "Linux", Machine: "x86_64",
		ServiceVersion: "tracepipe", PageSize: 4096, NumCPUs: 2})
	info, err := DecodePacket(pkt)
	if err != nil || info.PayloadField != FieldSystemInfo {
		t.Fatalf("payload %d, err %v", info.PayloadField, err)
	}
	si := fieldsOf(t, info.Payload)
	if string(si[4].Bytes) != "tracepipe" || si[6].Varint != 4096 || si[8].Varint != 2 {
		t.Errorf("system_info fields %+v", si)
	}
	u := fieldsOf(t, si[1].Bytes)
	if string(u[1].Bytes) != "Linux" || string(u[4].Bytes) != "x86_64" {
		t.Errorf("utsname %+v", u)
	}
	bare, _ := DecodePacket(AppendSystemInfo(nil, &SystemInfo{}))
	if _, ok := fieldsOf(t, bare.Payload)[1]; ok {
		t.Error("utsname written without HasUname")
	}
}

func TestAppendTraceConfigProtoVM(t *testing.T) {
	pkt := AppendTraceConfig(nil, &TraceConfig{
		DataSources: []TraceConfigDataSource{{Name: "a", HasProtoVM: true, ProtoVMMemoryKB: 128}},
	})
	info, err := DecodePacket(pkt)
	if err != nil || info.PayloadField != FieldTraceConfig {
		t.Fatalf("payload %d, err %v", info.PayloadField, err)
	}
	ds := fieldsOf(t, fieldsOf(t, info.Payload)[2].Bytes) // data_sources
	cfg := fieldsOf(t, ds[1].Bytes)                       // config
	if string(cfg[1].Bytes) != "a" || fieldsOf(t, cfg[12].Bytes)[1].Varint != 128 {
		t.Errorf("data source config %+v", cfg)
	}
}
