package metricsdoc

// Describe exposes describe to the tests.
var Describe = describe
