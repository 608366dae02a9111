"""The offline policy evaluator decides as IAM's documented evaluation logic does (examples from the IAM User
Guide's condition operator and multi-valued key pages)."""

from __future__ import annotations

import pytest

from neurondeploy.aws.policy_evaluation import Authorization, decision


def _policy(*statements):
    return {"Version": "2012-10-17", "Statement": list(statements)}


def _allow(action="ec2:DeleteVpc", resource="*", condition=None):
    statement = {"Effect": "Allow", "Action": action, "Resource": resource}
    if condition:
        statement["Condition"] = condition
    return statement


def test_no_matching_statement_is_an_implicit_deny_and_a_deny_wins():
    assert decision(_policy(_allow("s3:GetObject")), Authorization("ec2:DeleteVpc", "*")) == "implicit deny"
    denied = _policy(_allow("ec2:*"), {"Effect": "Deny", "Action": "ec2:Delete*", "Resource": "*"})
    assert decision(denied, Authorization("ec2:DeleteVpc", "*")) == "explicit deny"
    assert decision(denied, Authorization("ec2:CreateVpc", "*")) == "allow"


def test_actions_match_without_case_and_resources_with_it():
    document = _policy(_allow("EC2:deletevpc", "arn:aws:s3:::Bucket-*/x?"))
    assert decision(document, Authorization("ec2:DeleteVpc", "arn:aws:s3:::Bucket-1/x1")) == "allow"
    assert decision(document, Authorization("ec2:DeleteVpc", "arn:aws:s3:::bucket-1/x1")) == "implicit deny"
    assert decision(document, Authorization("ec2:DeleteVpc", "arn:aws:s3:::Bucket-1/x12")) == "implicit deny"


@pytest.mark.parametrize(
    ("condition", "context", "allowed"),
    [
        # values of one key OR; keys AND
        ({"StringEquals": {"aws:ResourceTag/team": ["a", "b"]}}, {"aws:ResourceTag/team": "b"}, True),
        (
            {"StringEquals": {"aws:ResourceTag/team": "a", "aws:ResourceTag/env": "x"}},
            {"aws:ResourceTag/team": "a"},
            False,
        ),
        # a key absent from the request fails a positive operator and satisfies a negated one
        ({"StringEquals": {"aws:ResourceTag/team": "a"}}, {}, False),
        ({"StringNotEquals": {"aws:ResourceTag/team": "a"}}, {}, True),
        ({"StringNotEquals": {"aws:ResourceTag/team": "a"}}, {"aws:ResourceTag/team": "a"}, False),
        ({"StringEqualsIfExists": {"aws:ResourceTag/team": "a"}}, {}, True),
        # condition keys are case-insensitive, values are not
        ({"StringEquals": {"AWS:resourcetag/team": "a"}}, {"aws:ResourceTag/team": "a"}, True),
        ({"StringEquals": {"aws:ResourceTag/team": "a"}}, {"aws:ResourceTag/team": "A"}, False),
        (
            {"StringLike": {"iam:PassedToService": "*.amazonaws.com"}},
            {"iam:PassedToService": "ec2.amazonaws.com"},
            True,
        ),
        ({"ArnLike": {"aws:SourceArn": "arn:aws:s3:::b-*"}}, {"aws:SourceArn": "arn:aws:s3:::c-1"}, False),
        ({"Null": {"aws:RequestTag/team": "true"}}, {}, True),
        ({"Null": {"aws:RequestTag/team": "false"}}, {}, False),
        ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:SecureTransport": "false"}, True),
        # multi-valued keys need a qualifier; ForAllValues holds for an absent key, ForAnyValue does not
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]}}, {"aws:TagKeys": ("a",)}, True),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]}}, {"aws:TagKeys": ("a", "c")}, False),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["a"]}}, {}, True),
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": ["a"]}}, {"aws:TagKeys": ("c", "a")}, True),
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": ["a"]}}, {}, False),
        ({"StringEquals": {"aws:TagKeys": "a"}}, {"aws:TagKeys": ("a", "b")}, False),
    ],
)
def test_conditions(condition, context, allowed):
    result = decision(_policy(_allow(condition=condition)), Authorization("ec2:DeleteVpc", "*", context))
    assert (result == "allow") is allowed


def test_what_it_cannot_evaluate_is_refused_not_guessed():
    with pytest.raises(ValueError, match="NumericLessThan"):
        decision(
            _policy(_allow(condition={"NumericLessThan": {"s3:max-keys": "10"}})), Authorization("ec2:DeleteVpc", "*")
        )
    with pytest.raises(ValueError, match="NotAction"):
        decision(_policy({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}), Authorization("ec2:X", "*"))


def test_policy_variables_take_the_request_value_and_match_nothing_without_it():
    document = _policy(
        _allow(
            "iam:CreateRole",
            "arn:aws:iam::${aws:PrincipalAccount}:role/*",
            {"StringEquals": {"iam:PermissionsBoundary": "arn:aws:iam::${aws:PrincipalAccount}:policy/b"}},
        )
    )
    mine = {"aws:PrincipalAccount": "111111111111", "iam:PermissionsBoundary": "arn:aws:iam::111111111111:policy/b"}
    assert decision(document, Authorization("iam:CreateRole", "arn:aws:iam::111111111111:role/x", mine)) == "allow"
    other_account = Authorization("iam:CreateRole", "arn:aws:iam::222222222222:role/x", mine)
    assert decision(document, other_account) == "implicit deny"
    no_account = {"iam:PermissionsBoundary": "arn:aws:iam::111111111111:policy/b"}
    assert decision(document, Authorization("iam:CreateRole", "arn:aws:iam::111111111111:role/x", no_account)) == (
        "implicit deny"
    )


def test_a_boundary_caps_the_policy_and_a_deny_in_either_wins():
    everything = _policy(_allow("*"))
    bound = _policy(
        _allow("s3:GetObject"), {"Effect": "Deny", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::x/*"}
    )
    assert decision(everything, Authorization("s3:GetObject", "arn:aws:s3:::y/k"), bound) == "allow"
    assert decision(everything, Authorization("iam:CreateUser", "*"), bound) == "implicit deny"
    assert decision(everything, Authorization("s3:GetObject", "arn:aws:s3:::x/k"), bound) == "explicit deny"
    assert decision(_policy(_allow("ec2:*")), Authorization("s3:GetObject", "arn:aws:s3:::y/k"), bound) == (
        "implicit deny"
    )
