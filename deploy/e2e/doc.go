// Package e2e holds the end-to-end test of the gpulens stack: the real
// Prometheus, with the shipped configuration (deploy/prometheus) and rules
// (alerts/), scraping the exporter on a simulated fleet, the simulated
// inference server and the load generator driving it. See e2e_test.go.
package e2e
