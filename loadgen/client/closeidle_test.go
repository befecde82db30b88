package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestCloseIdleConnections: the connection kept alive after a request is
// closed by CloseIdleConnections (the server sees it end), and the next
// request dials a new one.
func TestCloseIdleConnections(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(roleChunk + helloChunk + usageChunk + done))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, EndpointChat, time.Minute)
	if c.h1 == nil {
		t.Fatal("an http:// target without a proxy should use the h1 pool")
	}
	for i := range 2 {
		if res := c.Do(context.Background(), Request{Index: i, Prompt: "x"}, time.Now(), time.Now()); !res.OK() {
			t.Fatalf("request %d: %s %s", i, res.ErrorClass, res.Error)
		}
		if n := len(c.h1.idle); n != 1 {
			t.Fatalf("after request %d: %d idle connections, want 1", i, n)
		}
		c.CloseIdleConnections()
		if n := len(c.h1.idle); n != 0 {
			t.Fatalf("%d idle connections after CloseIdleConnections", n)
		}
		await(t, closed, "close of the idle connection")
	}
}
