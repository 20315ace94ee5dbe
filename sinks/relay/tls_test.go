package relay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all made for this test, and returns their file names.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey, otherCA string }

func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	mkCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		file := filepath.Join(dir, name+".pem")
		writePEM(t, file, "CERTIFICATE", der)
		return cert, key, file
	}
	ca, caKey, caFile := mkCA("ca")
	_, _, otherCA := mkCA("other-ca")
	leaf := func(name string, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		c, k := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, c, "CERTIFICATE", der)
		writePEM(t, k, "EC PRIVATE KEY", kder)
		return c, k
	}
	sc, sk := leaf("server", x509.ExtKeyUsageServerAuth)
	cc, ck := leaf("client", x509.ExtKeyUsageClientAuth)
	return testPKI{caFile, sc, sk, cc, ck, otherCA}
}

func writePEM(t *testing.T, name, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLSClientCert: a sender with a certificate from the receiver's
// client CA gets every packet through; one without a certificate, or
// trusting another CA, never gets a session.
func TestTLSClientCert(t *testing.T) {
	pki := newPKI(t)
	srvTLS, err := ServerTLS(pki.serverCert, pki.serverKey, pki.ca)
	if err != nil {
		t.Fatal(err)
	}
	store, err := remote.OpenStore(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	addr := startServer(t, store, ServerOptions{TLS: srvTLS})

	good, err := ClientTLS(pki.ca, pki.clientCert, pki.clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Address: addr, TLS: good, Identity: remote.Identity{Machine: 9, Hostname: "tls"}})
	if err != nil {
		t.Fatal(err)
	}
	sendRange(t, s, 0, 500, 50, true)
	closeSink(t, s)
	var ts []uint64
	for _, p := range readPackets(t, store.FileName(s.Identity())) {
		ts = append(ts, p.Timestamp)
	}
	checkExactlyOnce(t, "over TLS", ts, 500)

	noCert, _ := ClientTLS(pki.ca, "", "", "")
	wrongCA, _ := ClientTLS(pki.otherCA, pki.clientCert, pki.clientKey, "")
	for name, cfg := range map[string]*tls.Config{"no client cert": noCert, "unknown server CA": wrongCA} {
		s, err := New(Options{Address: addr, TLS: cfg, Identity: remote.Identity{Machine: 10, Hostname: "bad"}, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		sendRange(t, s, 0, 10, 5, false)
		testsupport.WaitUntil(t, name+": failed attempts", 10*time.Second, func() bool { return s.Failures.Load() >= 3 })
		if n := s.Connects.Load(); n != 0 {
			t.Errorf("%s: %d sessions established", name, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if err := s.Close(ctx); err != nil {
			t.Errorf("%s: Close: %v (a loss is counted, not an error)", name, err)
		}
		cancel()
		if st := s.Stats(); st.PacketsDroppedError != 10 || st.PacketsWritten != 0 {
			t.Errorf("%s: stats %+v, want the 10 packets counted as lost to the failure", name, st)
		}
		if err := s.Failed(); err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Errorf("%s: the sink's failure %v does not name TLS", name, err)
		}
	}
}
