package protovm

import "sort"

// NodeCost is the fixed number of bytes charged for every state-tree node and
// every map entry, matching Perfetto's Allocator on x86-64 (48 bytes), so
// that memory limits fail at the same points as the reference. Each message
// field, indexed element and keyed element costs two nodes (the map entry and
// the value node); the root costs nothing; byte payloads cost their length.
const NodeCost = 48

type kind uint8

const (
	kEmpty kind = iota
	kBytes
	kScalar
	kMessage
	kIndexed
	kMapped
)

func (k kind) String() string {
	switch k {
	case kEmpty:
		return "EMPTY"
	case kBytes:
		return "BYTES"
	case kScalar:
		return "SCALAR"
	case kMessage:
		return "MESSAGE"
	case kIndexed:
		return "INDEXED_REPEATED_FIELD"
	case kMapped:
		return "MAPPED_REPEATED_FIELD"
	}
	return "UNKNOWN"
}

// node is one state-tree node. Message, Indexed and Mapped nodes keep their
// children in ents sorted by key (field id, index or map key).
type node struct {
	kind   kind
	wire   uint8 // scalar wire type
	merged bool  // indexed: already cleared by the current merge
	val    uint64
	data   []byte
	ents   []entry
}

type entry struct {
	key uint64
	n   *node
}

// find returns the position of key in ents and whether it is present.
func (n *node) find(key uint64) (int, bool) {
	e := n.ents
	if l := len(e); l > 0 && e[l-1].key < key {
		return l, false
	}
	i := sort.Search(len(e), func(i int) bool { return e[i].key >= key })
	return i, i < len(e) && e[i].key == key
}

func (n *node) get(key uint64) *node {
	if i, ok := n.find(key); ok {
		return n.ents[i].n
	}
	return nil
}

// moveValue moves the value of src into dst (dst must be fresh).
func (dst *node) takeValue(src *node) {
	dst.kind, dst.wire, dst.merged, dst.val, dst.data, dst.ents = src.kind, src.wire, src.merged, src.val, src.data, src.ents
	src.kind, src.wire, src.merged, src.val, src.data, src.ents = kEmpty, 0, false, 0, nil, nil
}

// store is the state tree's allocator: it enforces the memory limit with
// Perfetto's accounting and recycles Go objects to keep patches
// allocation-free in steady state.
type store struct {
	limit    uint64
	used     uint64
	limitHit bool
	free     []*node
	bufs     [][]byte
}

func (s *store) nodeAbort() Status {
	s.limitHit = true
	return abortf("Failed to allocate element (%d bytes). Memory limit: %d [bytes]. Used: %d [bytes].)", NodeCost, s.limit, s.used)
}

// chargeNode accounts one node, failing when the limit would be exceeded.
func (s *store) chargeNode() bool {
	if s.used+NodeCost > s.limit {
		return false
	}
	s.used += NodeCost
	return true
}

// newNode allocates an Empty node.
func (s *store) newNode() (*node, Status) {
	if !s.chargeNode() {
		return nil, s.nodeAbort()
	}
	if l := len(s.free); l > 0 {
		n := s.free[l-1]
		s.free = s.free[:l-1]
		return n, statusOk
	}
	return &node{}, statusOk
}

// copyBytes charges and copies a payload.
func (s *store) copyBytes(b []byte) ([]byte, Status) {
	if s.used+uint64(len(b)) > s.limit {
		s.limitHit = true
		return nil, abortf("Failed to allocate %d bytes. Memory limit: %d bytes. Used: %d bytes.)", len(b), s.limit, s.used)
	}
	if len(b) == 0 {
		return nil, statusOk
	}
	s.used += uint64(len(b))
	var buf []byte
	for i := len(s.bufs) - 1; i >= 0 && i >= len(s.bufs)-4; i-- {
		if cap(s.bufs[i]) >= len(b) {
			buf = s.bufs[i][:len(b)]
			s.bufs[i] = s.bufs[len(s.bufs)-1]
			s.bufs = s.bufs[:len(s.bufs)-1]
			break
		}
	}
	if buf == nil {
		buf = make([]byte, len(b))
	}
	copy(buf, b)
	return buf, statusOk
}

func (s *store) releaseBytes(b []byte) {
	s.used -= uint64(len(b))
	if cap(b) > 0 && cap(b) <= 4096 && len(s.bufs) < 1024 {
		s.bufs = append(s.bufs, b[:0])
	}
}

// freeRefs deletes everything a node references (children, payload) and
// leaves the node itself with no data.
func (s *store) freeRefs(n *node) {
	switch n.kind {
	case kMessage, kIndexed, kMapped:
		for i := range n.ents {
			s.freeEntry(n.ents[i].n)
			n.ents[i] = entry{}
		}
		n.ents = n.ents[:0]
	case kBytes:
		s.releaseBytes(n.data)
		n.data = nil
	}
}

// freeNode deletes a value node and everything below it.
func (s *store) freeNode(n *node) {
	s.freeRefs(n)
	s.used -= NodeCost
	ents := n.ents[:0]
	*n = node{ents: ents}
	if len(s.free) < 4096 {
		s.free = append(s.free, n)
	}
}

// freeEntry deletes a map entry (its own node) and its value.
func (s *store) freeEntry(v *node) {
	s.used -= NodeCost
	s.freeNode(v)
}

// insert adds key→child to container c, charging the map entry. On failure
// the child is freed, like Perfetto's MapInsert.
func (s *store) insert(c *node, key uint64, child *node) Status {
	if !s.chargeNode() {
		st := s.nodeAbort()
		s.freeNode(child)
		return st.wrap("Failed to allocate node")
	}
	i, found := c.find(key)
	if found {
		s.freeNode(child)
		s.used -= NodeCost
		return abortf("Failed to insert intrusive map entry (key = %d). Duplicated key?", int32(key))
	}
	c.ents = append(c.ents, entry{})
	copy(c.ents[i+1:], c.ents[i:])
	c.ents[i] = entry{key, child}
	return statusOk
}

// removeAt unlinks entry i of c without freeing it.
func (c *node) removeAt(i int) {
	copy(c.ents[i:], c.ents[i+1:])
	c.ents[len(c.ents)-1] = entry{}
	c.ents = c.ents[:len(c.ents)-1]
}
