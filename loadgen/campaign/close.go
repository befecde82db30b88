package campaign

// CloseIdleConnections closes the connections the campaign's client keeps
// alive between requests (client.Client.CloseIdleConnections): for a
// caller that runs many campaigns one after the other (Search, search*.go).
func (c *Campaign) CloseIdleConnections() { c.client.CloseIdleConnections() }
