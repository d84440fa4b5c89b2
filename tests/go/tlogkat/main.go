// tlogkat checks idemgate's checkpoints and proofs with Go's sumdb/note and sumdb/tlog, and makes
// a log, checkpoints and proofs of its own for idemgate to check: known answers from an
// implementation idemgate does not share code with.
//
//	tlogkat check-proof PUBKEY PROOF             an inclusion proof (C2SP tlog-proof)
//	tlogkat check-tree PUBKEY OLD NEW PROOF      OLD's tree is a prefix of NEW's (PROOF: hashes)
//	tlogkat check-range PUBKEY CP FIRST LEFT LEAVES
//	                                             the records LEAVES (base64, a line each) from index
//	                                             FIRST, after the subtrees LEFT (hashes), end the
//	                                             tree checkpoint CP signs
//	tlogkat make SIGNKEY N INDEX OLD DIR         a log of N records; DIR/proof.tlog-proof proves
//	                                             record INDEX, DIR/old.cp and DIR/new.cp sign the
//	                                             trees of OLD and N records, DIR/tree.proof links them
package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "tlogkat: "+format+"\n", a...)
	os.Exit(1)
}

func read(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	return b
}

// open checks a checkpoint note's signature and reads its body: origin, size, root. The body is
// parsed here: tlog.ParseTree reads only go.sum's bodies.
func open(pubkey string, msg []byte) (int64, tlog.Hash) {
	v, err := note.NewVerifier(strings.TrimSpace(pubkey))
	if err != nil {
		fail("verifier key: %v", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		fail("checkpoint: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 || lines[0] != v.Name() {
		fail("checkpoint body: %q", n.Text)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("checkpoint size: %v", err)
	}
	return size, hash(lines[2])
}

func hash(s string) tlog.Hash {
	var h tlog.Hash
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != len(h) {
		fail("not a base64 hash: %q", s)
	}
	copy(h[:], b)
	return h
}

func checkProof(pubkey, file string) {
	text := string(read(file))
	head, cp, ok := strings.Cut(text, "\n\n")
	if !ok {
		fail("no checkpoint in the proof")
	}
	lines := strings.Split(head, "\n")
	if lines[0] != "c2sp.org/tlog-proof@v1" || !strings.HasPrefix(lines[1], "extra ") || !strings.HasPrefix(lines[2], "index ") {
		fail("not a tlog-proof with extra data: %q", head)
	}
	leaf, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[1], "extra "))
	if err != nil {
		fail("extra: %v", err)
	}
	index, err := strconv.ParseInt(strings.TrimPrefix(lines[2], "index "), 10, 64)
	if err != nil {
		fail("index: %v", err)
	}
	var p tlog.RecordProof
	for _, l := range lines[3:] {
		p = append(p, hash(l))
	}
	size, root := open(pubkey, []byte(cp))
	if err := tlog.CheckRecord(p, size, root, index, tlog.RecordHash(leaf)); err != nil {
		fail("record %d in tree %d: %v", index, size, err)
	}
	fmt.Printf("ok %d %d\n", index, size)
}

func checkTree(pubkey, oldFile, newFile, proofFile string) {
	oldSize, oldRoot := open(pubkey, read(oldFile))
	newSize, newRoot := open(pubkey, read(newFile))
	var p tlog.TreeProof
	for _, l := range strings.Fields(string(read(proofFile))) {
		p = append(p, hash(l))
	}
	if err := tlog.CheckTree(p, newSize, newRoot, oldSize, oldRoot); err != nil {
		fail("tree %d extends %d: %v", newSize, oldSize, err)
	}
	fmt.Printf("ok %d %d\n", oldSize, newSize)
}

// sparse holds stored hashes by their index: the subtrees left of a range, then the range's.
type sparse map[int64]tlog.Hash

func (h sparse) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		v, ok := h[x]
		if !ok {
			return nil, fmt.Errorf("stored hash %d is not known", x)
		}
		out[i] = v
	}
	return out, nil
}

// checkRange stores the hashes of the complete subtrees left of FIRST where tlog stores them,
// adds the records from FIRST with tlog.StoredHashes, and compares tlog.TreeHash with the
// checkpoint's root.
func checkRange(pubkey, cpFile string, first int64, leftFile, leavesFile string) {
	size, root := open(pubkey, read(cpFile))
	stored := sparse{}
	left := strings.Fields(string(read(leftFile)))
	k := 0
	for level := 62; level >= 0; level-- {
		if first>>uint(level)&1 == 1 {
			if k >= len(left) {
				fail("too few hashes left of %d", first)
			}
			start := first >> uint(level+1) << uint(level+1)
			stored[tlog.StoredHashIndex(level, start>>uint(level))] = hash(left[k])
			k++
		}
	}
	if k != len(left) {
		fail("%d hashes left of %d, not %d", len(left), first, k)
	}
	n := first
	for _, l := range strings.Fields(string(read(leavesFile))) {
		data, err := base64.StdEncoding.DecodeString(l)
		if err != nil {
			fail("leaf: %v", err)
		}
		hs, err := tlog.StoredHashes(n, data, stored)
		if err != nil {
			fail("record %d: %v", n, err)
		}
		for i, h := range hs {
			stored[tlog.StoredHashIndex(0, n)+int64(i)] = h
		}
		n++
	}
	if n != size {
		fail("the records end a tree of %d, the checkpoint signs %d", n, size)
	}
	got, err := tlog.TreeHash(n, stored)
	if err != nil {
		fail("%v", err)
	}
	if got != root {
		fail("the records end a tree with root %v, the checkpoint signs %v", got, root)
	}
	fmt.Printf("ok %d %d\n", first, size)
}

type hashes []tlog.Hash

func (h hashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = h[x]
	}
	return out, nil
}

func sign(signer note.Signer, origin string, size int64, root tlog.Hash) []byte {
	text := fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(root[:]))
	msg, err := note.Sign(&note.Note{Text: text}, signer)
	if err != nil {
		fail("sign: %v", err)
	}
	return msg
}

func write(path string, b []byte) {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fail("%v", err)
	}
}

func mk(skey string, n, index, old int64, dir string) {
	signer, err := note.NewSigner(strings.TrimSpace(skey))
	if err != nil {
		fail("signer key: %v", err)
	}
	var stored hashes
	var records [][]byte
	for i := int64(0); i < n; i++ {
		data := []byte(fmt.Sprintf(`{"record":%d}`, i))
		records = append(records, data)
		hs, err := tlog.StoredHashes(i, data, stored)
		if err != nil {
			fail("%v", err)
		}
		stored = append(stored, hs...)
	}
	root, err := tlog.TreeHash(n, stored)
	if err != nil {
		fail("%v", err)
	}
	oldRoot, err := tlog.TreeHash(old, stored)
	if err != nil {
		fail("%v", err)
	}
	rp, err := tlog.ProveRecord(n, index, stored)
	if err != nil {
		fail("%v", err)
	}
	tp, err := tlog.ProveTree(n, old, stored)
	if err != nil {
		fail("%v", err)
	}
	cp := sign(signer, signer.Name(), n, root)
	var b bytes.Buffer
	fmt.Fprintf(&b, "c2sp.org/tlog-proof@v1\nextra %s\nindex %d\n", base64.StdEncoding.EncodeToString(records[index]), index)
	for _, h := range rp {
		fmt.Fprintf(&b, "%s\n", base64.StdEncoding.EncodeToString(h[:]))
	}
	b.WriteString("\n")
	b.Write(cp)
	write(dir+"/proof.tlog-proof", b.Bytes())
	write(dir+"/new.cp", cp)
	write(dir+"/old.cp", sign(signer, signer.Name(), old, oldRoot))
	var t bytes.Buffer
	for _, h := range tp {
		fmt.Fprintf(&t, "%s\n", base64.StdEncoding.EncodeToString(h[:]))
	}
	write(dir+"/tree.proof", t.Bytes())
}

func num(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fail("not a number: %q", s)
	}
	return n
}

func main() {
	a := os.Args[1:]
	switch {
	case len(a) == 3 && a[0] == "check-proof":
		checkProof(string(read(a[1])), a[2])
	case len(a) == 5 && a[0] == "check-tree":
		checkTree(string(read(a[1])), a[2], a[3], a[4])
	case len(a) == 6 && a[0] == "check-range":
		checkRange(string(read(a[1])), a[2], num(a[3]), a[4], a[5])
	case len(a) == 6 && a[0] == "make":
		mk(string(read(a[1])), num(a[2]), num(a[3]), num(a[4]), a[5])
	default:
		fail("usage: check-proof PUBKEY PROOF | check-tree PUBKEY OLD NEW PROOF | check-range PUBKEY CP FIRST LEFT LEAVES | make SIGNKEY N INDEX OLD DIR")
	}
}
