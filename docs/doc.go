// Package docs holds Drover's documentation, organised by what the reader
// came to do (README.md in this folder is the map), and the tests that
// keep it honest: every relative link and #anchor in the README and the
// docs leads somewhere (TestLinks), every plan they show in full loads
// (TestPlansInDocsLoad), every file here is on the map
// (TestEveryDocIsOnTheMap), and the table of make targets is the Makefile's
// (TestMakeTargets). The generated references under
// reference/ are checked against the code in cmd/drctl
// (TestGeneratedReferences).
package docs
