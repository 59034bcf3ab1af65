// Package accuracy joins the outcomes that arrive later (the actual
// delivery time of a parcel, whether a transaction was fraud) to the
// predictions the gateway served, as they arrive, and turns the joined
// pairs into online error metrics per service, model version and slice.
//
// The parts:
//
//   - Prediction and Outcome are the two halves of a pair, joined on the
//     service and a business key (e.g. order_id; the request id when the
//     service names none).
//   - Store is where a half waits for the other: Bolt (one bbolt file, for
//     one process) or KV (a NATS JetStream key-value bucket, for a fleet:
//     a prediction served by one replica joins an outcome posted to
//     another). Both are bounded (MaxPending, the oldest evicted and
//     counted) and expire entries after the lookback.
//   - Joiner takes predictions (Offer: never blocks; a worker started by
//     Run writes them to the store in batches) and outcomes (Ingest: one
//     store transaction per batch). Ingest is idempotent (an outcome for a
//     key already joined or held counts once, as a duplicate), out-of-order
//     safe (an outcome before its prediction is held until the prediction
//     arrives or the lookback passes) and refuses outcomes observed longer
//     ago than the lookback (too_late).
//   - Every joined pair updates the metrics at once: for regression
//     outputs MAE, RMSE, bias, MAPE and interval coverage; for binary ones
//     accuracy, log loss, Brier score and AUC; over a rolling window, per
//     version and slice (all, route=…, group=…, and each configured header,
//     e.g. x-region=eu). Label coverage and label delay have metrics of
//     their own, and versions that declare an offline evaluation get the
//     online ÷ offline ratio.
//   - Compare answers a rollout's accuracy gate: the candidate's and the
//     stable version's error in one traffic group, per slice.
package accuracy
