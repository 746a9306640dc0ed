package flush

import (
	"context"
	"errors"
	"testing"
	"time"
)

// entered reports whether ch receives within a short wait.
func entered(ch <-chan func()) (func(), bool) {
	select {
	case leave := <-ch:
		return leave, true
	case <-time.After(100 * time.Millisecond):
		return nil, false
	}
}

func enterAsync(a *Admission, ctx context.Context, oldest time.Time) <-chan func() {
	ch := make(chan func(), 1)
	go func() {
		leave, err := a.Enter(ctx, oldest)
		if err == nil {
			ch <- leave
		}
	}()
	return ch
}

// TestAdmissionOldestFirst: a batch younger than one in flight by more than
// the bound waits until that write ends; one within the bound goes in at
// once, and so does any batch when nothing older is in flight.
func TestAdmissionOldestFirst(t *testing.T) {
	ctx := context.Background()
	a := NewAdmission(2*time.Second, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)

	spans, err := a.Enter(ctx, t0) // a backlog's oldest batch
	if err != nil {
		t.Fatal(err)
	}
	near := enterAsync(a, ctx, t0.Add(1500*time.Millisecond))
	leaveNear, ok := entered(near)
	if !ok {
		t.Fatal("a batch within the bound of the oldest waited")
	}
	logs := enterAsync(a, ctx, t0.Add(time.Minute))
	if _, ok := entered(logs); ok {
		t.Fatal("a batch a minute younger than one in flight went in")
	}
	if n := a.Waiting(); n != 1 {
		t.Fatalf("%d waiting, want 1", n)
	}
	spans()
	if _, ok := entered(logs); ok {
		t.Fatal("went in while a batch 58.5s older was still in flight")
	}
	leaveNear()
	leaveLogs, ok := entered(logs)
	if !ok {
		t.Fatal("the younger batch still waits once nothing older is in flight")
	}
	leaveLogs()
	leaveLogs() // twice is harmless
	if n := a.Waiting(); n != 0 {
		t.Fatalf("%d waiting after every write ended", n)
	}
	// Without a backlog nothing waits.
	l1, _ := a.Enter(ctx, t0.Add(time.Hour))
	l2, ok := entered(enterAsync(a, ctx, t0.Add(time.Hour+time.Second)))
	if !ok {
		t.Fatal("batches a second apart were ordered")
	}
	l1()
	l2()
}

// TestAdmissionCancel: a waiting batch whose context ends gets the
// context's error, and no longer holds anything back.
func TestAdmissionCancel(t *testing.T) {
	a := NewAdmission(time.Second, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	old, err := a.Enter(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := a.Enter(ctx, t0.Add(time.Minute))
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Enter: %v, want context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("a cancelled wait did not return")
	}
	if n := a.Waiting(); n != 0 {
		t.Fatalf("%d waiting after the cancel", n)
	}
	old()
	var nilAdmission *Admission
	leave, err := nilAdmission.Enter(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	leave()
}

func TestEntryTime(t *testing.T) {
	got, ok := entryTime("1733112345678-3")
	if !ok || !got.Equal(time.UnixMilli(1733112345678)) {
		t.Fatalf("entryTime = %v, %v", got, ok)
	}
	if _, ok := entryTime("damaged"); ok {
		t.Fatal("an id without a time parsed")
	}
	e := []keyedEntry{{}, {}, {}}
	e[0].ID, e[1].ID, e[2].ID = "1733112345678-0", "1733112340000-5", "x"
	if o := oldestEntry(e); !o.Equal(time.UnixMilli(1733112340000)) {
		t.Fatalf("oldestEntry = %v", o)
	}
}

// TestAdmissionStale: a write in flight for longer than stale (a lock holds
// it) stops holding younger batches back.
func TestAdmissionStale(t *testing.T) {
	ctx := context.Background()
	a := NewAdmission(time.Second, 300*time.Millisecond)
	t0 := time.Unix(1_700_000_000, 0)
	stuck, err := a.Enter(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	young := enterAsync(a, ctx, t0.Add(time.Minute))
	select {
	case leave := <-young:
		if d := time.Since(began); d < 250*time.Millisecond {
			t.Fatalf("went in after %s, before the write in flight went stale", d)
		}
		leave()
	case <-time.After(2 * time.Second):
		t.Fatal("still waiting 2s after the write in flight went stale")
	}
	stuck()
}
