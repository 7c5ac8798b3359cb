// Command drctl will be Drover's operator CLI. It is not implemented yet; it
// says so and exits non-zero rather than pretending to work.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "drctl: not yet implemented (see the operator-surface issue)")
	os.Exit(1)
}
