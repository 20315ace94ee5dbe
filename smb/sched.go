package smb

// site names a point where the producer and the service may interleave:
// between two atomic accesses to the SMB whose order the protocol relies
// on. yieldAt is empty in normal builds; the interleaving test (build tag
// smbsched) switches goroutines there to explore schedules that a loaded
// machine produces only rarely.
type site uint8

// The interleaving points. Those marked "a.mu" are reached with the
// arbiter's lock held.
const (
	siteAcquired       site = iota // writer: chunk Free → BeingWritten, header not yet stored (a.mu)
	siteChunkIDStored              // writer: chunk_id stored, writer_id/packets not yet (a.mu)
	sitePublished                  // writer: packets word (count/flags) stored
	siteReturned                   // writer: chunk BeingWritten → Complete (a.mu)
	siteScrapeState                // service: scrape loaded a page bitmap
	siteScrapeChunkID              // service: scrape loaded a chunk_id
	siteScrapeHeader               // service: scrape loaded the packets word
	siteScrapeCopied               // service: scrape handed out a chunk
	siteReleaseCleared             // service: freed chunk's header zeroed, state not yet Free
	siteStalled                    // writer: no free chunk, about to retry (Stall policy)
	numSites
)

// siteLocked reports whether s is reached with the arbiter's lock held.
func siteLocked(s site) bool {
	return s == siteAcquired || s == siteChunkIDStored || s == siteReturned
}
