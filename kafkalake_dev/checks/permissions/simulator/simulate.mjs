// Test-only: evaluates a JSON batch of IAM simulations with @cloud-copilot/iam-simulate (unmodified) and prints one
// JSON answer per simulation, in order. Input on stdin: [{request, identityPolicies, resourcePolicy?}, ...].
// Called by kafkalake_dev/checks/permissions/iam.py; the shapes are iam-simulate's own (Simulation, RequestGrant,
// RequestDenial).
import { getDenialReasons, getGrantReasons, runSimulation } from '@cloud-copilot/iam-simulate'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const answers = []
for (const simulation of JSON.parse(Buffer.concat(chunks).toString('utf8'))) {
  const result = await runSimulation(
    { serviceControlPolicies: [], resourceControlPolicies: [], ...simulation },
    { simulationMode: 'Strict' },
  )
  // resource '*' of an action that has no resource type (cloudwatch:PutMetricData) is one 'wildcard' simulation;
  // any other wildcard would be several, and a recorded request names one resource
  const one = result.resultType === 'single' ? result.result
    : result.resultType === 'wildcard' && result.results.length === 1 ? result.results[0] : undefined
  if (result.resultType === 'error') {
    answers.push({ result: 'Error', errors: result.errors })
  } else if (one === undefined) {
    answers.push({ result: 'Error', errors: { message: `not one resource (${result.resultType})` } })
  } else {
    answers.push({
      result: result.overallResult,
      grants: getGrantReasons(one.analysis),
      denials: getDenialReasons(one.analysis),
      ignoredContextKeys: one.ignoredContextKeys ?? [],
    })
  }
}
process.stdout.write(JSON.stringify(answers))
