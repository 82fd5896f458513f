// Package watchstream is the cheap client side of many HTTP watches of an
// apiserver, shared by the HTTP benchmarks and the hostile-client tests:
// one HTTP/2 connection per so many streams, and a JSON watch stream read
// as lines and searched with bytes.Index instead of decoded. With
// thousands of watchers on two cores a client-go decoder per watch would
// make the client, not the server, what is measured.
//
// The apiserver's JSON watch stream is one compact WatchEvent per line,
// {"type":"...","object":{...}}: json.Encoder ends each with a newline and
// strings inside escape theirs.
package watchstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/watchkeeper/watchkeeper/internal/childserver"
)

// Lines returns whole lines from a stream without allocating per line: the
// slice is valid until the next call.
type Lines struct {
	r   *bufio.Reader
	buf []byte // holds a line longer than r's buffer
}

func NewLines(r *bufio.Reader) *Lines { return &Lines{r: r} }

// Next is the next line, newline included; at the end of the stream or on
// an error, nil and the error.
func (l *Lines) Next() ([]byte, error) {
	line, err := l.r.ReadSlice('\n')
	if err == nil {
		return line, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	l.buf = append(l.buf[:0], line...)
	for {
		line, err = l.r.ReadSlice('\n')
		l.buf = append(l.buf, line...)
		if err == nil {
			return l.buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

var typePrefix = []byte(`{"type":"`)

// Type is the event type of one line (ADDED, BOOKMARK, ERROR, ...).
func Type(line []byte) ([]byte, bool) {
	if rest, ok := bytes.CutPrefix(line, typePrefix); ok {
		if end := bytes.IndexByte(rest, '"'); end > 0 {
			return rest[:end], true
		}
	}
	// Not the layout the apiserver writes today: decode it properly rather
	// than miscount.
	var ev struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" {
		return nil, false
	}
	return []byte(ev.Type), true
}

// Key is the search key of a string field or annotation name: the name
// quoted whole with its colon and opening quote, so managedFields'
// "f:<name>" does not match.
func Key(name string) []byte { return []byte(`"` + name + `":"`) }

// Value is the string value after the first occurrence of key (from Key)
// in line, or nil. The first resourceVersion of a line is the object's:
// metadata comes before spec, and managedFields holds none.
func Value(line, key []byte) []byte {
	i := bytes.Index(line, key)
	if i < 0 {
		return nil
	}
	v := line[i+len(key):]
	end := bytes.IndexByte(v, '"')
	if end < 0 {
		return nil
	}
	return v[:end]
}

// Pool is the client side of many watches: one transport, hence one HTTP/2
// connection, per streamsPerConn watches. Go's transport would dial more
// connections by itself once one is full, but concurrent first requests
// on a fresh transport can race to dial several and the spread is then up
// to chance; a transport per group of streams, each primed with one
// request before the watches go out, makes the layout exact.
type Pool struct {
	streamsPerConn int
	transports     []*http.Transport
	clients        []*http.Client
}

// NewPool makes a pool for watches watches of the server at url, every
// connection checked to speak HTTP/2: the pool is sized for streams, and
// over HTTP/1.1 every watch would be a connection of its own.
func NewPool(ctx context.Context, tlsCfg *tls.Config, url, token string, watches, streamsPerConn int) (*Pool, error) {
	p := &Pool{streamsPerConn: streamsPerConn}
	for range (watches + streamsPerConn - 1) / streamsPerConn {
		tr := childserver.NewTransport(tlsCfg)
		c := &http.Client{Transport: tr}
		p.transports = append(p.transports, tr)
		p.clients = append(p.clients, c)
		if err := prime(ctx, c, url, token); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

func prime(ctx context.Context, c *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("opening a client connection: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		return fmt.Errorf("server answered over %s, not HTTP/2", resp.Proto)
	}
	return nil
}

// Client is the client watch i goes through.
func (p *Pool) Client(i int) *http.Client { return p.clients[i/p.streamsPerConn] }

// Close closes the pool's idle connections.
func (p *Pool) Close() {
	for _, t := range p.transports {
		t.CloseIdleConnections()
	}
}
