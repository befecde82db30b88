// Package alerts holds gpulens's Prometheus recording and alerting rules
// (*.rules.yml) and their promtool unit tests (tests/*.test.yml). Its Go
// tests check the rules' conventions and runbook links, that the promtool
// tests cover every rule, that promtool catches a wrong expectation, that
// no rule depends on the order groups run in, and that every expression of
// the rules and dashboards names only metrics that live gpulens components
// serve.
//
// # Rule order
//
// A rule that reads a recorded series sits in the group that records it,
// after the recording rule. The rules of one group run one after the other
// in the order of the file, so the reader always sees this evaluation's
// value; groups run independently (Prometheus runs each on its own timer,
// promtool test rules in a random order at each step), so a reader in
// another group would see this evaluation's value or the previous one by
// luck: an alert one evaluation late at random, a test that fails
// sometimes. Hence each group lists its records first and the alerts on
// them last (the GPU, load generator and probe-baseline alerts are in
// gpulens-recording.rules.yml, the cost alerts in gpulens-cost.rules.yml);
// gpulens-alerts.rules.yml holds only alerts that read no record.
//
// Where the record belongs to a group with another interval or topic, the
// reader writes out the record's expression instead (the cost rules' busy
// share, the probe alert's thermal slowdown share), so the value is
// computed in the reader's own evaluation.
//
// The one allowed read of a later rule of the same group (or of the rule
// itself) is through a range selector, which states that the past is
// wanted: the running totals of gpulens-cost read their own previous value
// and the previous evaluation's day of the month with last_over_time(x[1d]).
// Read as an instant vector, a later record would be one evaluation late.
//
// TestRulesReadOnlyEarlierRecordsOfTheirGroup enforces this on every rule
// file; scripts/check-rules.sh (make check-rules) runs the promtool tests
// several times, so that an order dependence that slips past it still
// shows as a failure.
package alerts
