package workflows

import "go.temporal.io/sdk/workflow"

// LatestGeneration is the generation new runs take: the maximum a run
// asks for, which a test that mocks the generation marker must name.
var LatestGeneration = workflow.Version(len(generations) - 1)
