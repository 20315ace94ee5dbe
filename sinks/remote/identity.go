package remote

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"strings"
)

// machineIDFiles are read in order; the first non-empty one identifies the
// host. /etc/machine-id is stable across reboots; boot_id only within one.
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id", "/proc/sys/kernel/random/boot_id"}

// MachineID returns a stable, non-zero 64-bit id of this host: a hash of
// /etc/machine-id (falling back to the D-Bus copy, the boot id, then the
// hostname). The raw machine-id is never sent: it is hashed with a
// tracepipe-specific prefix, as machine-id(5) asks of applications.
func MachineID() uint64 {
	seed := ""
	for _, f := range machineIDFiles {
		if b, err := os.ReadFile(f); err == nil {
			if s := strings.TrimSpace(string(b)); s != "" {
				seed = s
				break
			}
		}
	}
	if seed == "" {
		seed, _ = os.Hostname()
	}
	return HashMachineID(seed)
}

// HashMachineID maps any string to a non-zero machine id.
func HashMachineID(seed string) uint64 {
	sum := sha256.Sum256([]byte("tracepipe machine id\x00" + seed))
	if id := binary.LittleEndian.Uint64(sum[:8]); id != 0 {
		return id
	}
	return 1
}

// NewIdentity returns this host's identity with a fresh session id.
// machine overrides the derived machine id when non-zero; hostname
// overrides os.Hostname when non-empty.
func NewIdentity(machine uint64, hostname string) Identity {
	id := Identity{Machine: machine, Hostname: hostname}
	if id.Machine == 0 {
		id.Machine = MachineID()
	}
	if id.Hostname == "" {
		id.Hostname, _ = os.Hostname()
	}
	_, _ = rand.Read(id.Session[:]) // never fails (crypto/rand)
	return id
}
