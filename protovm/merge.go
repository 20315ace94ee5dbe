package protovm

// rwMerge is a shallow merge of the message bytes src into the cursor node:
//   - an empty src leaves the node untouched;
//   - with delIfSrcEmpty, an empty length-delimited src field deletes the
//     node's field;
//   - with skipSubmessages, a field already decoded into a message is kept;
//   - otherwise the src field replaces the node's field; a repeated field is
//     replaced wholesale (cleared on its first occurrence, then appended);
//     a field id seen twice in src becomes a repeated field.
func (v *VM) rwMerge(c *rwCursor, src []byte, skipSubmessages, delIfSrcEmpty bool) Status {
	if c.n == nil {
		return invalidCursor()
	}
	n := c.n
	if n.kind != kEmpty && n.kind != kMessage && n.kind != kBytes {
		return abortf("Attempted MERGE operation but node has type %s", n.kind)
	}
	if len(src) == 0 {
		return statusOk
	}
	if st := v.toMessage(n); !st.IsOk() {
		return st
	}
	seen := v.mergeSeen[:0]
	defer func() { v.mergeSeen = seen[:0] }()
	w := v.walk(src)
	for w.next() {
		f := &w.f
		key := uint64(f.id)
		idx, present := n.find(key)
		if present && delIfSrcEmpty && f.wire == wireLen && len(f.data) == 0 {
			old := n.ents[idx].n
			n.removeAt(idx)
			v.st.freeEntry(old)
			continue
		}
		if present && skipSubmessages && n.ents[idx].n.kind == kMessage {
			continue
		}
		child, st := v.nodeFromField(f)
		if !st.IsOk() {
			return st
		}
		if !present {
			if st := v.st.insert(n, key, child); !st.IsOk() {
				return st
			}
			seen = append(seen, f.id)
			continue
		}
		cur := n.ents[idx].n
		if cur.kind == kMapped {
			// The new node is lost but stays charged, as in Perfetto.
			return abortf("Merge operation of mapped repeated field is not supported (field id = %d)", f.id)
		}
		again := false
		for _, id := range seen {
			if id == f.id {
				again = true
				break
			}
		}
		if again && cur.kind != kIndexed {
			if st := v.toIndexed(cur); !st.IsOk() {
				v.st.freeNode(child)
				return st
			}
			cur.merged = true
		}
		if cur.kind == kIndexed {
			if !cur.merged {
				v.st.freeRefs(cur)
				cur.merged = true
			}
			// Perfetto ignores the outcome of this insert.
			_ = v.st.insert(cur, uint64(len(cur.ents)), child)
			if !again {
				seen = append(seen, f.id)
			}
			continue
		}
		v.st.freeNode(cur)
		n.ents[idx].n = child
		seen = append(seen, f.id)
	}
	if !w.st.IsOk() {
		return w.st
	}
	for i := range n.ents {
		if e := n.ents[i].n; e.kind == kIndexed {
			e.merged = false
		}
	}
	return statusOk
}
