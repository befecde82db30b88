package client

// CloseIdleConnections closes the connections kept alive between
// requests, as net/http's Client.CloseIdleConnections does: a caller that
// makes a Client per campaign (a capacity search makes one per probe)
// closes the last one's connections before the next, rather than leaving
// them to the garbage collector. Connections in use are not touched; the
// Client stays usable (it dials anew).
func (c *Client) CloseIdleConnections() {
	if c.h1 != nil {
		c.h1.closeIdle()
	}
	c.http.CloseIdleConnections()
}

func (p *h1Pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}
