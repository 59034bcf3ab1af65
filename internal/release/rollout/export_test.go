package rollout

// Hash exposes the routing hash to the external tests.
var Hash = hash
