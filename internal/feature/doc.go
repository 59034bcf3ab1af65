// Package feature holds the feature store's leaf types: value types and
// values, the definitions (entities, sources, feature views, feature
// services) as compiled from a feature repository, entity keys, and the
// compact row encoding that online stores keep per (view, entity).
//
// It imports nothing else from Sluice's feature store, so the registry,
// the offline and online stores, materialization and serving can all share
// it, as infer is shared by the model server.
package feature
