package main

import "encoding/json"

// The two-round-trip scenarios: a unit of work is a hold settled to its actual amount
// (POST /v1/holds, then POST /v1/holds/{id}/settle), or a lease acquired and released
// (POST /v1/limits/{name}/limit on a concurrency limit, then POST /v1/leases/{id}/release).
// Their throughput counts units of work (pairs of requests), next to random-32's decisions.
const (
	holdSettle   = "hold-settle"
	leaseRelease = "lease"
)

// twoStep runs one unit of work of kind on conn. ok is whether it was admitted (and closed);
// an unexpected status counts as an error of w; err means the connection is broken.
func twoStep(conn *rawConn, auth, kind, name, key string, w *worker) (ok bool, err error) {
	var first, second string
	var body []byte
	switch kind {
	case holdSettle:
		first, body = "/v1/holds", []byte(`{"limits":[{"name":"`+name+`","key":"`+key+`","count":2}],"ttl":60000}`)
	default:
		first, body = "/v1/limits/"+name+"/limit", []byte(`{"key":"`+key+`"}`)
	}
	status, b, err := conn.post(first, auth, body)
	if err != nil {
		return false, err
	}
	var got struct {
		OK      *bool  `json:"ok"`
		HoldID  string `json:"holdId"`
		LeaseID string `json:"leaseId"`
	}
	switch {
	case status >= 500:
		w.status5xx++
		w.errors++
		return false, nil
	case status == 429 || (status == 200 && kind == leaseRelease && json.Unmarshal(b, &got) == nil && got.OK != nil && !*got.OK):
		return false, nil // refused: nothing to close
	case (status != 201 && status != 200) || json.Unmarshal(b, &got) != nil:
		w.errors++
		return false, nil
	}
	switch kind {
	case holdSettle:
		second, body = "/v1/holds/"+got.HoldID+"/settle", []byte(`{"counts":[1]}`)
	default:
		second, body = "/v1/leases/"+got.LeaseID+"/release", nil
	}
	if status, _, err = conn.post(second, auth, body); err != nil {
		return false, err
	}
	if status != 200 && status != 204 {
		if status >= 500 {
			w.status5xx++
		}
		w.errors++ // the connection is fine: the next unit of work goes on
		return false, nil
	}
	return true, nil
}
