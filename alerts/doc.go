// Package alerts holds gpulens's Prometheus recording and alerting rules
// (*.rules.yml) and their promtool unit tests (tests/*.test.yml). Its Go
// tests check the rules' conventions and runbook links, that the promtool
// tests cover every rule, that promtool catches a wrong expectation, and
// that every expression of the rules and dashboards names only metrics that
// live gpulens components serve.
package alerts
