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
