package protovm

// roCursor is the read-only cursor over the patch: either raw bytes (the
// whole packet, or an element entered by array index) or one decoded field.
type roCursor struct {
	isField bool
	f       field
	raw     []byte
}

func (c *roCursor) lenData() ([]byte, Status) {
	if !c.isField {
		return c.raw, statusOk
	}
	if c.f.wire != wireLen {
		return nil, abortf("Attempted to access field as length-delimited, but actual wire type is %d", c.f.wire)
	}
	return c.f.data, statusOk
}

func (c *roCursor) isScalar() bool {
	return c.isField && (c.f.wire == wireVarint || c.f.wire == wireFixed32 || c.f.wire == wireFixed64)
}

func (c *roCursor) isBytes() bool { return !c.isField || c.f.wire == wireLen }

func (c *roCursor) bytes() []byte {
	if !c.isField {
		return c.raw
	}
	return c.f.data
}

func (c *roCursor) getScalar() (uint8, uint64, Status) {
	if !c.isScalar() {
		return 0, 0, abortf("Attempted to access length-delimited field as a scalar")
	}
	return c.f.wire, c.f.val, statusOk
}

// enterField moves to the first occurrence of field id (Error if absent).
func (v *VM) roEnterField(c *roCursor, id uint32) Status {
	data, st := c.lenData()
	if !st.IsOk() {
		return st
	}
	w := v.walk(data)
	for w.next() {
		if w.f.id == id {
			c.isField, c.f, c.raw = true, w.f, nil
			return statusOk
		}
	}
	if !w.st.IsOk() {
		return w.st
	}
	return statusError
}

// roEnterIndex moves to the index-th occurrence of field id, as raw bytes
// (a scalar occurrence becomes empty bytes, as in Perfetto).
func (v *VM) roEnterIndex(c *roCursor, id, index uint32) Status {
	data, st := c.lenData()
	if !st.IsOk() {
		return st
	}
	var cur uint32
	w := v.walk(data)
	for w.next() {
		if w.f.id != id {
			continue
		}
		if cur == index {
			raw := w.f.data
			if w.f.wire != wireLen {
				raw = nil
			}
			c.isField, c.f, c.raw = false, field{}, raw
			return statusOk
		}
		cur++
	}
	if !w.st.IsOk() {
		return w.st
	}
	return statusError
}
