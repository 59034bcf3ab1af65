// Package console is Sluice's web console: a few server-rendered pages on
// the admin port that show an operator, at a glance, whether trouble is in
// the models, the features or the traffic.
//
//	/console/           overview: readiness and every problem found
//	/console/models     versions, states, load errors with reasons, live
//	                    throughput and latency
//	/console/features   feature views: freshness against ttl, last
//	                    materialization, hot subset and its hit share
//	/console/services   gateway services: routes and canary weights,
//	                    rollout stage, shadow, breaker, fallback, endpoints
//	/console/errors     the latest failed requests from the access log
//
// The same data is served as JSON under /console/api/ (summary, models,
// features, services, errors, series), which `sluice status` reads.
//
// # Data
//
// The console reads consumer-side interfaces (ModelsSource, FeaturesSource,
// GatewaySource, ErrorsSource) that the wiring fills with the adapters
// here: ModelsFromManager, FeaturesFromStore, GatewayFromAdmin (or
// GatewayFromURL for a remote admin port) and an ErrorLog fed by the
// gateway's access log. The live charts come from the process's own
// Prometheus registry: Run gathers it every SampleEvery and keeps the
// derived rates and latency quantiles of the last History samples in
// memory; nothing outside the process is needed.
//
// # Safety
//
// Every page is rendered with html/template, all assets (the vendored uPlot
// chart library, the page script and style sheet) are embedded in the
// binary, and every answer carries a Content-Security-Policy that allows
// only this origin's scripts, styles and fetches. The console only reads:
// it has no forms and changes nothing.
package console
