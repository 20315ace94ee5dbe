package perfettoipc

func u64(v uint64) *uint64  { return &v }
func u32(v uint32) *uint32  { return &v }
func boolp(v bool) *bool    { return &v }
func strp(v string) *string { return &v }
