// schema-check.mjs - validates Kubernetes manifests against the API schemas that the npm
// package kubernetes-models carries (OpenAPI of the Kubernetes release it was generated
// from), with no cluster and no kubectl.
//
//   node schema-check.mjs FILE.yaml...
//
// Every document must have apiVersion, kind and metadata.name, and an object of a built-in
// kind must pass its schema (types, formats, enums, required fields; the Kubernetes schemas
// allow unknown fields, so a misspelt optional field goes unnoticed here). A
// Kubeflow TFJob is not a built-in kind: its replica pod templates are checked as core/v1
// PodTemplates instead. Prints one line per object; exits 1 on the first file with errors.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

// apiVersion -> module of kubernetes-models ("v1" is the core group).
const moduleFor = (apiVersion) =>
  apiVersion === "v1" ? "kubernetes-models/v1" : `kubernetes-models/${apiVersion}`;

async function validate(obj) {
  let mod;
  try {
    mod = await import(moduleFor(obj.apiVersion));
  } catch {
    return `no schema for apiVersion ${obj.apiVersion}`;
  }
  const Model = mod[obj.kind];
  if (!Model) return `no schema for ${obj.apiVersion} ${obj.kind}`;
  try {
    new Model(obj).validate();
  } catch (err) {
    return String(err.message || err);
  }
  return null;
}

async function checkTFJob(obj) {
  const errors = [];
  const specs = obj.spec?.tfReplicaSpecs;
  if (!specs || typeof specs !== "object") return ["spec.tfReplicaSpecs is missing"];
  const { PodTemplate } = await import("kubernetes-models/v1");
  for (const [type, spec] of Object.entries(specs)) {
    if (!["Chief", "Master", "PS", "Worker", "Evaluator"].includes(type))
      errors.push(`tfReplicaSpecs.${type}: not a TFJob replica type`);
    if (spec.replicas !== undefined && !(Number.isInteger(spec.replicas) && spec.replicas >= 0))
      errors.push(`tfReplicaSpecs.${type}.replicas must be a non-negative integer`);
    if (!["Always", "OnFailure", "Never", "ExitCode", undefined].includes(spec.restartPolicy))
      errors.push(`tfReplicaSpecs.${type}.restartPolicy: ${spec.restartPolicy}`);
    try {
      new PodTemplate({ metadata: { name: `${type}` }, template: spec.template }).validate();
    } catch (err) {
      errors.push(`tfReplicaSpecs.${type}.template: ${err.message || err}`);
    }
  }
  return errors;
}

let failed = false;
for (const file of process.argv.slice(2)) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  for (const doc of docs) {
    if (doc.errors.length) {
      console.log(`${file}: YAML: ${doc.errors.map((e) => e.message).join("; ")}`);
      failed = true;
      continue;
    }
    const obj = doc.toJS();
    if (obj === null || obj === undefined) continue;
    // kubectl kustomize writes a Secret's base64 values folded over several lines; the API
    // server's base64 decoder skips line breaks, the schema's "byte" format does not.
    if (obj.kind === "Secret" && obj.data && typeof obj.data === "object")
      for (const [key, value] of Object.entries(obj.data))
        if (typeof value === "string") obj.data[key] = value.replace(/[\r\n]/g, "");
    // kustomization.yaml is kustomize's own file, not an API object.
    if (String(obj.apiVersion).startsWith("kustomize.config.k8s.io/")) continue;
    const what = `${file}: ${obj.kind ?? "?"} ${obj.metadata?.name ?? "?"}`;
    let errors = [];
    if (!obj.apiVersion || !obj.kind || !obj.metadata?.name) {
      errors.push("apiVersion, kind and metadata.name are required");
    } else if (obj.apiVersion === "kubeflow.org/v1" && obj.kind === "TFJob") {
      errors = await checkTFJob(obj);
    } else {
      const err = await validate(obj);
      if (err) errors.push(err);
    }
    if (errors.length) {
      failed = true;
      for (const e of errors) console.log(`${what}: ${e}`);
    } else {
      console.log(`${what}: ok`);
    }
  }
}
process.exit(failed ? 1 : 0);
