package workflows

import "time"

// SetSiteWaitAfter sets, for one test, how long a call sits unstarted
// in a site's task queue before its step says it waits for the site's
// worker. Set it before the test's workers start; the returned func
// restores it once they have stopped.
func SetSiteWaitAfter(d time.Duration) (restore func()) {
	old := siteWaitAfter
	siteWaitAfter = d
	return func() { siteWaitAfter = old }
}

const OwnPendingPoll = ownPendingPoll

// SetRecordLaterRetry sets, for one test, how often the hand-over of a
// failover's changes made without its record asks again; the returned
// func restores it.
func SetRecordLaterRetry(first, most time.Duration) (restore func()) {
	old := *recordLaterOptions.RetryPolicy
	recordLaterOptions.RetryPolicy.InitialInterval, recordLaterOptions.RetryPolicy.MaximumInterval = first, most
	return func() { *recordLaterOptions.RetryPolicy = old }
}

// RecordLaterID is the workflow id of the hand-over of a failover run's
// changes made without its record.
func RecordLaterID(plan, run string) string { return recordLaterID(plan, run) }
