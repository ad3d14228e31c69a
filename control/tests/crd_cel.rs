//! Kubernetes' CEL libraries and cost limits in `x-kubernetes-validations`, through the real
//! kubectl: a definition whose rules use url, ip, cidr, quantity and format accepts good
//! objects and refuses bad ones with kube's messages; a rule whose loops the estimate cannot
//! see (a split string) is stopped at run time past kube's per-call limit; a definition with
//! nested loops over an unbounded list is refused by the estimated cost, as kube refuses it.

mod common;

use common::{eventually, kubectl, TestServer};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: netconfs.cel.example.com
spec:
  group: cel.example.com
  scope: Namespaced
  names: {plural: netconfs, singular: netconf, kind: NetConf}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "!has(self.subnet) || !has(self.address) || cidr(self.subnet).containsIP(self.address)"
              message: address must be in the subnet
            properties:
              endpoint:
                type: string
                maxLength: 256
                x-kubernetes-validations:
                - rule: "url(self).getScheme() == 'https' && url(self).getPort() != '80'"
                  message: endpoint must be https
              address:
                type: string
                maxLength: 64
                x-kubernetes-validations:
                - rule: "isIP(self) && ip(self).family() == 4 && !ip(self).isLoopback()"
                  message: address must be an IPv4 address, not loopback
              subnet:
                type: string
                maxLength: 64
                x-kubernetes-validations:
                - rule: "isCIDR(self) && cidr(self) == cidr(self).masked()"
                  message: subnet must be a masked CIDR
              memory:
                type: string
                maxLength: 32
                x-kubernetes-validations:
                - rule: "quantity(self).isLessThan(quantity('1Gi'))"
                  messageExpression: "'memory ' + self + ' is over 1Gi'"
              name:
                type: string
                maxLength: 253
                x-kubernetes-validations:
                - rule: "!format.dns1123Label().validate(self).hasValue()"
                  messageExpression: "format.dns1123Label().validate(self).value().join(', ')"
              csv:
                type: string
                maxLength: 4096
                x-kubernetes-validations:
                - rule: "self.split(',').all(x, self.split(',').all(y, self.split(',').all(z, true)))"
"#;

const UNBOUNDED: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: loops.cel.example.com
spec:
  group: cel.example.com
  scope: Namespaced
  names: {plural: loops, singular: loop, kind: Loop}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              items:
                type: array
                items: {type: integer}
                x-kubernetes-validations:
                - rule: "self.all(x, self.all(y, self.all(z, true)))"
"#;

fn apply(s: &TestServer, yaml: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, yaml).unwrap();
    kubectl(s, &["apply", "-f", file.to_str().unwrap()])
}

fn netconf(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: cel.example.com/v1\nkind: NetConf\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{spec}"
    )
}

fn refused(s: &TestServer, name: &str, spec: &str, want: &str) {
    let (ok, out, err) = apply(s, &netconf(name, spec));
    assert!(!ok, "{name} was accepted: {out}");
    assert!(
        err.contains(&format!(r#"The NetConf "{name}" is invalid"#)) && err.contains(want),
        "{name}: want {want:?}, got {err}"
    );
}

#[test]
fn kubernetes_cel_libraries_and_cost_limits() {
    let s = TestServer::start();
    let (ok, out, err) = apply(&s, CRD);
    assert!(ok, "{out}{err}");
    eventually(20, "the resource is served", || {
        let (code, _) = s.http("GET", "/apis/cel.example.com/v1/netconfs", None);
        (code == 200).then_some(())
    });

    let good = "  endpoint: https://example.com:8443/api?x=1\n  address: 10.1.2.3\n  subnet: 10.1.0.0/16\n  memory: 512Mi\n  name: my-net\n  csv: a,b,c\n";
    let (ok, out, err) = apply(&s, &netconf("good", good));
    assert!(ok, "{out}{err}");

    refused(
        &s,
        "plain-http",
        "  endpoint: http://example.com:80/\n",
        r#"spec.endpoint: Invalid value: "string": endpoint must be https"#,
    );
    refused(
        &s,
        "not-a-url",
        "  endpoint: example.com\n",
        r#"spec.endpoint: Invalid value: "string": URL parse error during conversion from string: parse "example.com": invalid URI for request evaluating rule: endpoint must be https"#,
    );
    refused(
        &s,
        "loopback",
        "  address: 127.0.0.1\n",
        r#"spec.address: Invalid value: "string": address must be an IPv4 address, not loopback"#,
    );
    refused(
        &s,
        "outside",
        "  address: 10.2.0.1\n  subnet: 10.1.0.0/16\n",
        r#"spec: Invalid value: "object": address must be in the subnet"#,
    );
    refused(
        &s,
        "unmasked",
        "  subnet: 10.1.2.3/16\n",
        r#"spec.subnet: Invalid value: "string": subnet must be a masked CIDR"#,
    );
    refused(
        &s,
        "big",
        "  memory: 2Gi\n",
        r#"spec.memory: Invalid value: "string": memory 2Gi is over 1Gi"#,
    );
    refused(
        &s,
        "not-a-quantity",
        "  memory: lots\n",
        "spec.memory: Invalid value: \"string\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' evaluating rule: quantity(self).isLessThan(quantity('1Gi'))",
    );
    refused(
        &s,
        "bad-name",
        "  name: My_Net\n",
        "spec.name: Invalid value: \"string\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    );

    // 200 items, looped over three deep: 8 million steps, stopped past the per-call limit.
    let csv: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    let started = std::time::Instant::now();
    refused(
        &s,
        "expensive",
        &format!("  csv: \"{}\"\n", csv.join(",")),
        "spec.csv: Invalid value: \"string\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.split(',').all(x, self.split(',').all(y, self.split(',').all(z, true)))",
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the limit stopped the rule early"
    );

    // Nested loops over an unbounded list: refused when the definition is written.
    let (ok, out, err) = apply(&s, UNBOUNDED);
    assert!(!ok, "{out}");
    for want in [
        r#"The CustomResourceDefinition "loops.cel.example.com" is invalid"#,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[items].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[items].x-kubernetes-validations[0].rule: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
        "spec.versions[0].schema.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x",
    ] {
        assert!(err.contains(want), "want {want:?}, got {err}");
    }
    // With maxItems the same rule is cheap enough.
    let bounded = UNBOUNDED.replace(
        "                items: {type: integer}\n",
        "                maxItems: 10\n                items: {type: integer}\n",
    );
    let (ok, out, err) = apply(&s, &bounded);
    assert!(ok, "{out}{err}");
}
