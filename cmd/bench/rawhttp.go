package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// rawConn is a minimal HTTP/1.1 keep-alive client for one connection. net/http's client costs
// about as much CPU per request as the server under test, and on 2 cores every cycle the load
// generator spends is one the server and PostgreSQL do not get; this one writes a prebuilt
// request and reads the status and body, nothing else. It understands exactly what the server
// sends: Content-Length or chunked bodies.
type rawConn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
	buf  bytes.Buffer
}

func dialRaw(addr string) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{addr: addr, c: c, r: bufio.NewReaderSize(c, 16<<10)}, nil
}

func (rc *rawConn) close() { _ = rc.c.Close() }

// post sends one POST and returns the status and body (valid until the next call).
func (rc *rawConn) post(path, auth string, body []byte) (int, []byte, error) {
	rc.buf.Reset()
	rc.buf.WriteString("POST ")
	rc.buf.WriteString(path)
	rc.buf.WriteString(" HTTP/1.1\r\nHost: ")
	rc.buf.WriteString(rc.addr)
	rc.buf.WriteString("\r\nAuthorization: Bearer ")
	rc.buf.WriteString(auth)
	rc.buf.WriteString("\r\nContent-Type: application/json\r\nContent-Length: ")
	rc.buf.WriteString(strconv.Itoa(len(body)))
	rc.buf.WriteString("\r\n\r\n")
	rc.buf.Write(body)
	_ = rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.c.Write(rc.buf.Bytes()); err != nil {
		return 0, nil, err
	}
	return rc.readResponse()
}

func (rc *rawConn) readResponse() (int, []byte, error) {
	line, err := rc.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, err
	}
	length, chunked := -1, false
	for {
		h, err := rc.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, nil, err
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")) && bytes.EqualFold(value, []byte("chunked")):
			chunked = true
		}
	}
	switch {
	case status == 204 || status == 304: // no body, and no length to say so
		return status, nil, nil
	case chunked:
		var body []byte
		for {
			sizeLine, err := rc.r.ReadSlice('\n')
			if err != nil {
				return 0, nil, err
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(sizeLine)), 16, 32)
			if err != nil {
				return 0, nil, err
			}
			chunk := make([]byte, n+2) // the chunk and its CRLF
			if _, err := io.ReadFull(rc.r, chunk); err != nil {
				return 0, nil, err
			}
			if n == 0 {
				return status, body, nil
			}
			body = append(body, chunk[:n]...)
		}
	case length >= 0:
		body := make([]byte, length)
		_, err := io.ReadFull(rc.r, body)
		return status, body, err
	default:
		return 0, nil, errors.New("response without a length")
	}
}
