package gateway_test

import "strings"

// etaPath is where every test configuration serves its service.
const etaPath = "/v1/services/eta:predict"

// etaService reads features of the test feature repository: three
// inputs, one per missing-value policy.
const etaService = `    - name: eta
      path: POST /v1/services/eta:predict
      entities:
        - {name: user, join_key: user_id}
        - {name: route, join_key: route_id}
      request_fields:
        - {name: base_eta, type: float32, required: true}
        - {name: route_delay_factor, type: float32}
        - {name: express, type: bool}
        - {name: note, type: string}
      feature_service: eta
      model: {name: eta_model, version: "1"}
      outputs:
        - {name: eta_minutes, from: eta_prediction}
        - {name: confidence, from: confidence_score}
`

// etaInputs are etaService's inputs: "user" fails on a missing value,
// "route" fills -1, "flags" fills 0.
const etaInputs = `[
        {tensor: user, datatype: FP32, missing: fail, features: [user_stats:trips, user_stats:rating, user_stats:premium, user_embedding:embedding]},
        {tensor: route, datatype: FP64, missing: default, default: -1, features: [route_features:distance_km, field:base_eta, field:route_delay_factor]},
        {tensor: flags, datatype: INT32, missing: zero, features: [field:express, field:route_id]}]`

// plainService reads no features: its one input is built from request
// fields.
const plainService = `    - name: eta
      path: POST /v1/services/eta:predict
      entities:
        - {name: user, join_key: user_id}
      request_fields:
        - {name: base_eta, type: float32, required: true}
        - {name: tier, type: string}
      model: {name: eta_model, version: "1"}
      outputs:
        - {name: eta_minutes, from: eta_prediction}
        - {name: confidence, from: confidence_score}
`

const (
	anonAllowed   = "anonymous: {allowed: true}"
	defaultRoutes = "[{name: default, route: {weighted: [{backend: local, weight: 100}]}}]"
	localBackend  = "[{name: local, kind: in_process}]"
)

// yamlOpts are the parts a test changes in the generated configuration.
type yamlOpts struct {
	plain    bool     // plainService instead of etaService
	gateway  []string // lines under gateway:, e.g. anonAllowed
	service  []string // extra lines of the service, e.g. "feature_breaker: {...}"
	inputs   string   // the service's inputs, flow style [etaInputs or the plain one]
	routes   string   // the service's routes, flow style [defaultRoutes]
	backends string   // the gateway's backends, flow style [localBackend]
}

// gatewayYAML writes a gateway-only sluice.yaml.
func gatewayYAML(o yamlOpts) string {
	var b strings.Builder
	b.WriteString("gateway:\n  listen: \"127.0.0.1:8080\"\n  admin: \"127.0.0.1:9901\"\n")
	for _, l := range o.gateway {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("  services:\n")
	inputs := o.inputs
	if o.plain {
		b.WriteString(plainService)
		if inputs == "" {
			inputs = "[{tensor: x, features: [field:user_id, field:base_eta]}]"
		}
	} else {
		b.WriteString(etaService)
		if inputs == "" {
			inputs = etaInputs
		}
	}
	b.WriteString("      inputs: " + inputs + "\n")
	b.WriteString("      routes: " + or(o.routes, defaultRoutes) + "\n")
	for _, l := range o.service {
		b.WriteString("      " + l + "\n")
	}
	b.WriteString("  backends: " + or(o.backends, localBackend) + "\n")
	return b.String()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
