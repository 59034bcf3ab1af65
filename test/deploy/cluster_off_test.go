//go:build !kubeapi

package deploy_test

// Without the kubeapi build tag the real control plane is not part of the
// run (its binaries take a long cold build: scripts/install-kube.sh), so
// there is nothing to stop.
func stopCluster() {}
