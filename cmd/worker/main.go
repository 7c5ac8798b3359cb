// Command worker will be the Temporal worker process that runs Drover's
// workflows and activities. It is not implemented yet; it says so and
// exits non-zero rather than pretending to work.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "drover worker: not yet implemented (see the workflows and operator-surface issues)")
	os.Exit(1)
}
