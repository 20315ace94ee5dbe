package protovm

// This file holds the operations on the read-write state tree, with
// Perfetto's RwProto cursor semantics: lazy conversions between node kinds
// and the exact order of allocations (which decides where a memory limit
// fails and what partial state is left behind).

// rwCursor points at a node of the state. parent is the container holding it
// (nil for the root or for a cursor produced by iterating a repeated field,
// which, as in Perfetto, has no parent link). n == nil means the cursor was
// invalidated by a delete.
type rwCursor struct {
	n      *node
	parent *node
	key    uint64
}

func invalidCursor() Status { return abortf("Attempted to access invalid cursor") }

// decodeFields fills the empty container msg with the fields of b. A field
// id seen twice becomes an indexed repeated node.
func (v *VM) decodeFields(msg *node, b []byte) Status {
	w := v.walk(b)
	for w.next() {
		f := &w.f
		child, st := v.nodeFromField(f)
		if !st.IsOk() {
			return st
		}
		existing := msg.get(uint64(f.id))
		if existing == nil {
			if st := v.st.insert(msg, uint64(f.id), child); !st.IsOk() {
				return st.wrap("Insert message field (id = %d)", f.id)
			}
			continue
		}
		if st := v.toIndexed(existing); !st.IsOk() {
			v.st.freeNode(child)
			return st
		}
		if st := v.st.insert(existing, uint64(len(existing.ents)), child); !st.IsOk() {
			return st.wrap("Insert repeated field (id = %d, index = %d)", f.id, len(existing.ents))
		}
	}
	return w.st
}

// nodeFromField builds a Bytes or Scalar node from a decoded field.
func (v *VM) nodeFromField(f *field) (*node, Status) {
	if f.wire == wireLen {
		data, st := v.st.copyBytes(f.data)
		if !st.IsOk() {
			return nil, st
		}
		n, st := v.st.newNode()
		if !st.IsOk() {
			v.st.releaseBytes(data)
			return nil, st
		}
		n.kind, n.data = kBytes, data
		return n, statusOk
	}
	n, st := v.st.newNode()
	if !st.IsOk() {
		return nil, st
	}
	n.kind, n.wire, n.val = kScalar, f.wire, f.val
	return n, statusOk
}

// toMessage converts Empty or Bytes into Message.
func (v *VM) toMessage(n *node) Status {
	switch n.kind {
	case kMessage:
		return statusOk
	case kEmpty:
		n.kind = kMessage
		n.ents = n.ents[:0]
		return statusOk
	case kBytes:
	default:
		return abortf("Attempted conversion to message but node has type %s", n.kind)
	}
	tmp := &v.scratchMsg
	tmp.kind = kMessage
	tmp.ents = tmp.ents[:0]
	if st := v.decodeFields(tmp, n.data); !st.IsOk() {
		v.st.freeRefs(tmp)
		return st
	}
	v.st.releaseBytes(n.data)
	n.data = nil
	n.kind = kMessage
	// Swap the slices so the scratch keeps a buffer for next time.
	n.ents, tmp.ents = tmp.ents, n.ents[:0]
	return statusOk
}

// toIndexed converts a node into an indexed repeated field; a non-empty
// value becomes element 0.
func (v *VM) toIndexed(n *node) Status {
	switch n.kind {
	case kIndexed:
		return statusOk
	case kMapped:
		return abortf("Attempted \"convert to indexed repeated field\" operation but node has type %s", n.kind)
	case kEmpty:
		n.kind = kIndexed
		n.merged = false
		n.ents = n.ents[:0]
		return statusOk
	}
	child, st := v.st.newNode()
	if !st.IsOk() {
		return st
	}
	child.takeValue(n)
	n.kind = kIndexed
	n.merged = false
	return v.st.insert(n, 0, child)
}

// toMapped converts a node into a repeated field keyed by keyField.
func (v *VM) toMapped(n *node, keyField uint32) Status {
	switch n.kind {
	case kMapped:
		return statusOk
	case kEmpty:
		n.kind = kMapped
		n.ents = n.ents[:0]
		return statusOk
	case kBytes, kMessage:
		key, st := readScalarField(n, keyField)
		if !st.IsOk() {
			return st
		}
		child, st := v.st.newNode()
		if !st.IsOk() {
			return st
		}
		child.takeValue(n)
		n.kind = kMapped
		return v.st.insert(n, key, child)
	case kIndexed:
		// Elements are moved one by one; on a failure the moved ones and the
		// failing one are lost (still charged), as in Perfetto. Duplicate
		// keys keep the first element; later ones are dropped (still
		// charged).
		old := n.ents
		var mapped []entry
		for len(old) > 0 {
			e := old[0]
			old = old[1:]
			n.ents = old
			key, st := readScalarField(e.n, keyField)
			if !st.IsOk() {
				return st
			}
			tmp := node{ents: mapped}
			if i, found := tmp.find(key); !found {
				mapped = append(mapped, entry{})
				copy(mapped[i+1:], mapped[i:])
				mapped[i] = entry{key, e.n}
			}
		}
		n.kind = kMapped
		n.ents = mapped
		return statusOk
	}
	return abortf("Attempted to access field as MappedRepeatedField but node has type %s", n.kind)
}

// readScalarField reads sub-field id of a message node (raw or decoded).
func readScalarField(n *node, id uint32) (uint64, Status) {
	switch n.kind {
	case kBytes:
		w := fieldWalk{b: n.data} // no budget: Perfetto charges none here
		for w.next() {
			if w.f.id != id {
				continue
			}
			if w.f.wire == wireLen {
				return 0, abortf("Attempted to length-delimited field (id=%d) as scalar", id)
			}
			return w.f.val, statusOk
		}
		return 0, abortf("Attempted to read scalar field (id=%d) but it is not present", id)
	case kMessage:
		c := n.get(uint64(id))
		if c == nil {
			return 0, abortf("Attempted to read scalar field (id=%d) but it is not present", id)
		}
		if c.kind != kScalar {
			return 0, abortf("Attempted to read scalar field (id=%d) from node with type %s", id, c.kind)
		}
		return c.val, statusOk
	}
	return 0, abortf("Attempted to read scalar field (id=%d) but parent node has type %s", id, n.kind)
}

// hasField converts the cursor node to a message and reports whether it has
// the field.
func (v *VM) hasField(c *rwCursor, id uint32) (bool, Status) {
	if c.n == nil {
		return false, invalidCursor()
	}
	if st := v.toMessage(c.n); !st.IsOk() {
		return false, st
	}
	_, ok := c.n.find(uint64(id))
	return ok, statusOk
}

// messageField finds or creates field id of message node n.
func (v *VM) messageField(n *node, id uint32) (*node, Status) {
	if st := v.toMessage(n); !st.IsOk() {
		return nil, st
	}
	if c := n.get(uint64(id)); c != nil {
		return c, statusOk
	}
	child, st := v.st.newNode()
	if !st.IsOk() {
		return nil, st
	}
	if st := v.st.insert(n, uint64(id), child); !st.IsOk() {
		return nil, st
	}
	return child, statusOk
}

func (v *VM) rwEnterField(c *rwCursor, id uint32) Status {
	if c.n == nil {
		return invalidCursor()
	}
	child, st := v.messageField(c.n, id)
	if !st.IsOk() {
		return st
	}
	switch child.kind {
	case kIndexed:
		return abortf("Attempted to enter field (id=%d) as a simple field but it is an indexed repeated field", id)
	case kMapped:
		return abortf("Attempted to enter field (id=%d) as a simple field but it is a mapped repeated field", id)
	}
	*c = rwCursor{n: child, parent: c.n, key: uint64(id)}
	return statusOk
}

func (v *VM) rwEnterIndex(c *rwCursor, id, index uint32) Status {
	if c.n == nil {
		return invalidCursor()
	}
	rep, st := v.messageField(c.n, id)
	if !st.IsOk() {
		return st
	}
	if st := v.toIndexed(rep); !st.IsOk() {
		return st
	}
	child := rep.get(uint64(index))
	if child == nil {
		if uint64(index) > uint64(len(rep.ents)) {
			return abortf("Attempted to insert repeated field at arbitrary position (only append operation is supported)")
		}
		child, st = v.st.newNode()
		if !st.IsOk() {
			return st
		}
		if st := v.st.insert(rep, uint64(index), child); !st.IsOk() {
			return st
		}
	}
	*c = rwCursor{n: child, parent: rep, key: uint64(index)}
	return statusOk
}

func (v *VM) rwEnterKey(c *rwCursor, id, keyField uint32, key uint64) Status {
	if c.n == nil {
		return invalidCursor()
	}
	rep, st := v.messageField(c.n, id)
	if !st.IsOk() {
		return st
	}
	if st := v.toMapped(rep, keyField); !st.IsOk() {
		return st
	}
	child := rep.get(key)
	if child == nil {
		child, st = v.st.newNode()
		if !st.IsOk() {
			return st
		}
		if st := v.st.insert(rep, key, child); !st.IsOk() {
			return st
		}
	}
	*c = rwCursor{n: child, parent: rep, key: key}
	return statusOk
}

func (v *VM) rwGetScalar(c *rwCursor) (uint64, Status) {
	if c.n == nil {
		return 0, invalidCursor()
	}
	if c.n.kind != kScalar {
		return 0, abortf("Attempted \"get scalar\" operation but node has type %s", c.n.kind)
	}
	return c.n.val, statusOk
}

func (v *VM) rwSetBytes(c *rwCursor, b []byte) Status {
	if c.n == nil {
		return invalidCursor()
	}
	n := c.n
	if n.kind != kEmpty && n.kind != kBytes && n.kind != kMessage {
		return abortf("Attempted \"set bytes\" operation but node has type %s", n.kind)
	}
	data, st := v.st.copyBytes(b)
	if !st.IsOk() {
		return st
	}
	v.st.freeRefs(n)
	n.kind, n.data = kBytes, data
	return statusOk
}

func (v *VM) rwSetScalar(c *rwCursor, wire uint8, val uint64) Status {
	if c.n == nil {
		return invalidCursor()
	}
	n := c.n
	if n.kind != kEmpty && n.kind != kScalar {
		return abortf("Attempted \"set scalar\" operation but node has type %s", n.kind)
	}
	n.kind, n.wire, n.val = kScalar, wire, val
	return statusOk
}

// rwDelete deletes the cursor node. A node without parent link (the root,
// or an element reached by iteration) is reset to Empty without releasing
// its memory, exactly like Perfetto (whose root delete does not free).
func (v *VM) rwDelete(c *rwCursor) Status {
	if c.n == nil {
		return invalidCursor()
	}
	if c.parent == nil {
		c.n.kind, c.n.data, c.n.ents, c.n.merged = kEmpty, nil, nil, false
		return statusOk
	}
	p := c.parent
	i, ok := p.find(c.key)
	if !ok || p.ents[i].n != c.n {
		ok = false
		for j := range p.ents {
			if p.ents[j].n == c.n {
				i, ok = j, true
				break
			}
		}
	}
	if ok {
		p.removeAt(i)
		v.st.freeEntry(c.n)
	}
	c.n = nil
	return statusOk
}
