// s3server: an in-memory S3 server on loopback for the object-store tests.
// It listens on 127.0.0.1 (port 0 picks a free one), creates the buckets
// named by -bucket, writes the chosen port to -port-file once it accepts
// connections, and serves until it is killed. Requests are not
// authenticated: the server is for tests only and binds loopback only.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	port := flag.Int("port", 0, "TCP port on 127.0.0.1 (0: any free port)")
	portFile := flag.String("port-file", "", "write the port here once listening")
	buckets := flag.String("bucket", "test", "comma-separated buckets to create")
	flag.Parse()

	backend := s3mem.New()
	for _, b := range strings.Split(*buckets, ",") {
		if b == "" {
			continue
		}
		if err := backend.CreateBucket(b); err != nil {
			log.Fatalf("s3server: create bucket %s: %v", b, err)
		}
	}
	faker := gofakes3.New(backend, gofakes3.WithTimeSkewLimit(0))

	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Fatalf("s3server: listen: %v", err)
	}
	if *portFile != "" {
		p := ln.Addr().(*net.TCPAddr).Port
		tmp := *portFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d\n", p)), 0o644); err != nil {
			log.Fatalf("s3server: %v", err)
		}
		if err := os.Rename(tmp, *portFile); err != nil {
			log.Fatalf("s3server: %v", err)
		}
	}
	log.Fatal(http.Serve(ln, faker.Server()))
}
