"""The catalogue's data is internally consistent and agrees with botocore and sagemaker-core."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from neurondeploy import catalog
from neurondeploy.catalog import _data, image_accounts_source
from neurondeploy.errors import CatalogError
from neurondeploy.specs import load_spec

ALL = catalog.instance_types()
SUPPORTED = [it for it in ALL.values() if it.compile_target is not None]
ECR_URI = re.compile(r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/[a-z0-9-]+:[\w.-]+$")


# ---- instances -----------------------------------------------------------------------------------


def test_the_catalogue_covers_every_family_in_the_facts():
    assert {it.family for it in ALL.values()} == {"inf2", "trn1", "trn1n", "trn2", "inf1"}
    assert len(ALL) == 12


def test_hbm_total_is_cores_times_per_core_and_matches_the_facts_table():
    for it in ALL.values():
        assert it.hbm_total_gib == it.device_hbm_gib, it.name
    assert catalog.get_instance("inf2.48xlarge").hbm_total_gib == 24 * 16 == 384
    trn2 = catalog.get_instance("trn2.48xlarge")
    assert (trn2.neuron_cores, trn2.physical_neuron_cores, trn2.hbm_total_gib) == (64, 128, 1536)


def test_cores_follow_from_chips():
    per_chip = {"inferentia2": 2, "trainium": 2, "trainium2": 4, "inferentia": 4}  # logical cores per chip
    for it in ALL.values():
        assert it.neuron_cores == it.chips * per_chip[it.accelerator], it.name


def test_lookup_accepts_the_sagemaker_prefix():
    it = catalog.get_instance("ml.inf2.xlarge")
    assert it is catalog.get_instance("inf2.xlarge")
    assert it.sagemaker_name == "ml.inf2.xlarge"
    assert catalog.get_instance(" ML.TRN1.32XLARGE ").name == "trn1.32xlarge"


def test_unknown_instance_suggests_the_closest_name():
    with pytest.raises(CatalogError) as err:
        catalog.get_instance("inf2.xlarg")
    assert "inf2.xlarg" in err.value.message
    assert "did you mean 'inf2.xlarge'" in err.value.hint


def test_sagemaker_flags_agree_with_botocore():
    from botocore.loaders import Loader

    shapes = Loader().load_service_model("sagemaker", "service-2")["shapes"]
    training = set(shapes["TrainingInstanceType"]["enum"])
    endpoint = set(shapes["ProductionVariantInstanceType"]["enum"])
    transform = set(shapes["TransformInstanceType"]["enum"])
    for it in ALL.values():
        assert it.sagemaker_training == (it.sagemaker_name in training), it.name
        assert it.sagemaker_endpoint == (it.sagemaker_name in endpoint), it.name
        assert it.sagemaker_transform == (it.sagemaker_name in transform), it.name
    # and every Neuron type SageMaker trains or serves on is catalogued
    neuron = {t for t in training | endpoint if re.match(r"ml\.(inf|trn)\d", t)}
    assert neuron <= {it.sagemaker_name for it in ALL.values()}


def test_inf2_is_not_a_training_type():
    assert not any(it.sagemaker_training for it in ALL.values() if it.family == "inf2")
    assert all(it.sagemaker_endpoint for it in ALL.values() if it.family == "inf2")


def test_multi_node_efa_only_on_the_big_trainium_types():
    assert {it.name for it in ALL.values() if it.efa_devices > 0} == {
        "trn1.32xlarge",
        "trn1n.32xlarge",
        "trn2.48xlarge",
    }
    assert catalog.get_instance("trn1.32xlarge").efa_devices == 8
    assert catalog.get_instance("trn1n.32xlarge").efa_devices == 16
    assert not catalog.get_instance("trn1.2xlarge").multi_node


def test_volume_size_rule_follows_local_nvme():
    assert catalog.get_instance("trn1.2xlarge").nvme_instance_storage
    assert catalog.get_instance("trn1.32xlarge").nvme_instance_storage
    assert not any(it.nvme_instance_storage for it in ALL.values() if it.family == "inf2")


def test_compile_targets():
    targets = {it.family: it.compile_target for it in ALL.values()}
    assert targets == {"inf2": "inf2", "trn1": "trn1", "trn1n": "trn1n", "trn2": "trn2", "inf1": None}
    assert {it.artifact_target for it in ALL.values() if it.family in ("inf2", "trn1", "trn1n")} == {"trn1"}


def test_prices_are_positive_and_marked_third_party():
    for it in ALL.values():
        assert it.price_usd_per_hour is not None and it.price_usd_per_hour > 0, it.name
        assert it.price_in(it.price_region) == it.price_usd_per_hour
        assert all(p > 0 for _, p in it.prices_by_region)
        assert it.price_source and not it.price_confirmed
        assert it.ri_effective_usd_per_hour is None or 0 < it.ri_effective_usd_per_hour < it.price_usd_per_hour
    assert catalog.get_instance("inf2.xlarge").price_usd_per_hour == 0.7582
    assert catalog.get_instance("trn2.48xlarge").price_region == "us-east-2"


def test_every_sagemaker_type_a_template_uses_has_an_ml_price_with_its_source():
    templates = sorted((Path(__file__).parents[2] / "templates").glob("*.yaml"))
    used = {load_spec(path).spec.instance_type for path in templates if load_spec(path).spec.platform == "sagemaker"}
    assert {"inf2.xlarge", "inf2.8xlarge", "trn1.2xlarge", "trn1.32xlarge"} <= used
    for name in used:
        it = catalog.get_instance(name)
        if it.family == "trn2":  # no ml.trn2 price is published (test_vllm_neuron: its plan says it is a lower bound)
            assert it.sagemaker_price_usd_per_hour is None and it.price_source, name
            continue
        assert it.sagemaker_price_usd_per_hour is not None and it.sagemaker_price_source, name


def test_ml_prices_are_above_ec2_third_party_or_derived_and_say_so():
    trn1 = catalog.get_instance("trn1.32xlarge")
    family_ratio = trn1.sagemaker_price_usd_per_hour / trn1.price_usd_per_hour  # [FMBENCH] 28.497 / [VANTAGE] 21.50
    for it in ALL.values():
        if it.sagemaker_price_usd_per_hour is None:
            assert not it.sagemaker_price_source and it.family in ("trn2", "inf1"), it.name
            continue
        assert it.sagemaker_endpoint or it.sagemaker_training, it.name
        assert it.sagemaker_price_usd_per_hour > it.price_usd_per_hour, it.name  # SageMaker bills above EC2
        assert not it.sagemaker_price_confirmed, it.name  # third-party or derived, never an AWS price list
        if it.sagemaker_price_derived:
            assert it.sagemaker_price_source.startswith("DERIVED") and it.family in ("trn1", "trn1n")
            assert it.sagemaker_price_usd_per_hour == pytest.approx(it.price_usd_per_hour * family_ratio, abs=0.001)
        else:
            assert "[FMBENCH]" in it.sagemaker_price_source and "third-party" in it.sagemaker_price_source
    assert catalog.get_instance("inf2.xlarge").sagemaker_price_usd_per_hour == 0.99
    assert catalog.price_per_hour(trn1, 2, platform="sagemaker") == pytest.approx(2 * 28.497)
    assert catalog.price_per_hour(trn1, platform="sagemaker", region="eu-west-1") is None  # us-east-1 figures only


def test_price_per_hour_scales_with_count_and_region():
    it = catalog.get_instance("trn1.32xlarge")
    assert catalog.price_per_hour(it) == 21.5
    assert catalog.price_per_hour(it, 4) == 86.0
    inf2 = catalog.get_instance("inf2.xlarge")
    assert catalog.price_per_hour(inf2, 2, region="eu-west-1") == pytest.approx(2 * 0.94775)
    assert catalog.price_per_hour(inf2, region="af-south-1") is None
    with pytest.raises(ValueError):
        catalog.price_per_hour(it, 0)


def test_regions_come_from_data_and_fallbacks_are_marked():
    assert set(catalog.get_instance("trn1.32xlarge").regions) == {"us-east-1", "us-east-2", "us-west-2"}
    assert "ap-northeast-2" in catalog.get_instance("inf2.xlarge").regions
    assert "ap-northeast-2" not in catalog.get_instance("inf2.48xlarge").regions
    trn1n = catalog.get_instance("trn1n.32xlarge")
    assert trn1n.regions_fallback and trn1n.regions_source.startswith("FALLBACK")
    assert set(trn1n.regions) == set(catalog.image_regions("training"))
    assert "us-east-1" in catalog.regions() and "af-south-1" not in catalog.regions()


# ---- tensor-parallel degrees ---------------------------------------------------------------------


def test_every_tp_degree_fits_the_instance_and_comes_from_the_documented_set():
    checked = 0
    for it in SUPPORTED:
        for backend in catalog.tp_backends():
            table = catalog.tp_tables().get((backend, it.accelerator))
            if table is None:
                assert catalog.legal_tp_degrees(it, backend) == (), (it.name, backend)
                continue
            degrees = catalog.legal_tp_degrees(it, backend)
            assert degrees, (it.name, backend)
            assert list(degrees) == sorted(set(degrees))
            assert set(degrees) <= set(table.degrees)
            assert all(0 < d <= it.neuron_cores for d in degrees), (it.name, backend, degrees)
            assert set(table.degrees) - set(degrees) == {d for d in table.degrees if d > it.neuron_cores}
            checked += 1
    assert checked >= 20


def test_documented_tp_sets_divide_the_largest_instance():
    largest = {}
    for it in SUPPORTED:
        largest[it.accelerator] = max(largest.get(it.accelerator, 0), it.neuron_cores)
    for (backend, accel), table in catalog.tp_tables().items():
        top = max(table.degrees)
        assert all(top % d == 0 for d in table.degrees), (backend, accel)
        if backend != "trace":  # sharding backends reach the biggest instance of the family
            assert top == largest[accel], (backend, accel)
        assert table.source


def test_tp_degrees_from_the_reported_mismatches():
    # TP=24 on inf2.24xlarge (12 cores) and TP=32 on inf2.48xlarge (24 cores) are not legal (aws-neuron/aws-neuron-sdk issue 749; the vLLM issue of TP=32 on inf2.48xlarge).
    assert catalog.legal_tp_degrees(catalog.get_instance("inf2.24xlarge"), "nxdi") == (1, 2, 4, 8)
    assert 32 not in catalog.legal_tp_degrees(catalog.get_instance("inf2.48xlarge"), "nxdi")
    assert catalog.legal_tp_degrees(catalog.get_instance("trn1.32xlarge"), "training") == (1, 2, 8, 32)
    assert catalog.legal_tp_degrees(catalog.get_instance("trn2.48xlarge"), "nxdi")[-1] == 64


def test_trace_is_one_model_per_core():
    for it in SUPPORTED:
        assert catalog.legal_tp_degrees(it, "trace") == (1,)


def test_tp_errors():
    with pytest.raises(CatalogError) as err:
        catalog.legal_tp_degrees(catalog.get_instance("inf2.xlarge"), "nxdj")
    assert "nxdi" in err.value.hint
    # no documented set -> nothing is legal (training on inf2, transformers-neuronx on trn2, anything on inf1)
    assert catalog.legal_tp_degrees(catalog.get_instance("inf2.48xlarge"), "training") == ()
    assert catalog.legal_tp_degrees(catalog.get_instance("trn2.48xlarge"), "transformers-neuronx") == ()
    assert catalog.legal_tp_degrees(catalog.get_instance("inf1.24xlarge"), "nxdi") == ()


# ---- SDK lifecycle -------------------------------------------------------------------------------


def test_releases_cover_2_20_to_2_32():
    assert list(catalog.sdk_releases()) == [f"2.{m}.0" for m in range(20, 33)]
    assert catalog.get_sdk("2.32.0").released == "2026-08-17"
    assert catalog.get_sdk("2.26.1") is catalog.get_sdk("2.26")


@pytest.mark.parametrize(
    ("field", "last"),
    [
        ("torch_neuronx", "2.31.0"),
        ("xla_training", "2.29.0"),
        ("nxd_training", "2.28.0"),
        ("nxdi", "2.31.0"),
        ("training_dlc", "2.30.0"),
        ("inference_dlc", "2.31.0"),
        ("transformers_neuronx", "2.25.0"),
        ("xla_bf16_env", "2.24.0"),
    ],
)
def test_lifecycle_flags(field, last):
    have = [v for v, r in catalog.sdk_releases().items() if getattr(r, field)]
    assert have[-1] == last
    assert have == list(catalog.sdk_releases())[: len(have)]  # contiguous from 2.20


def test_training_stops_after_2_28():
    catalog.check_sdk_for("training", "2.28.0")
    catalog.check_sdk_for("training", "2.20")
    with pytest.raises(CatalogError) as err:
        catalog.check_sdk_for("training", "2.30.0")
    assert "NxDT" in err.value.message and "announce-eos-nxdt-nxd-core-training.rst" in err.value.message
    assert "2.28.0" in err.value.hint
    with pytest.raises(CatalogError):
        catalog.check_sdk_for("training", "2.29.1")
    assert catalog.latest_sdk_for("training") == "2.28.0"


def test_inference_stops_after_2_31():
    catalog.check_sdk_for("trace-inference", "2.31.0")
    catalog.check_sdk_for("nxdi-inference", "2.31.0")
    for path in ("trace-inference", "nxdi-inference"):
        with pytest.raises(CatalogError) as err:
            catalog.check_sdk_for(path, "2.32.0")
        assert "torch-neuronx" in err.value.message and "[NSDK]" in err.value.message
        assert "2.31.0" in err.value.hint
        assert catalog.latest_sdk_for(path) == "2.31.0"
    assert catalog.maintenance_warnings("nxdi-inference", "2.29") == ()
    assert any("NxD Inference" in w for w in catalog.maintenance_warnings("nxdi-inference", "2.30"))


def test_sdk_lookup_errors():
    with pytest.raises(CatalogError, match="2.19"):
        catalog.get_sdk("2.19.1")
    with pytest.raises(CatalogError, match="not a Neuron SDK version"):
        catalog.get_sdk("latest")
    with pytest.raises(CatalogError) as err:
        catalog.check_sdk_for("trainig", "2.28.0")
    assert "'training'" in err.value.hint


def test_auto_cast_default_changed_in_2_27():
    assert catalog.default_auto_cast("2.26.1") == "matmult"
    assert catalog.default_auto_cast("2.27.0") == "none"
    assert catalog.default_auto_cast("2.32") == "none"


# ---- images --------------------------------------------------------------------------------------


def test_every_image_region_has_an_account():
    for purpose in catalog.image_purposes():
        if catalog.public_registry(purpose):  # no account: a public registry serves every region
            assert catalog.image_regions(purpose) == ()
            assert catalog.neuron_image(purpose, "us-east-1").startswith(f"{catalog.public_registry(purpose)}/")
            continue
        regions = catalog.image_regions(purpose)
        assert regions, purpose
        for region in regions:
            assert re.fullmatch(r"\d{12}", catalog.dlc_account(region)), region
            assert ECR_URI.match(catalog.neuron_image(purpose, region)), (purpose, region)


def test_instance_regions_have_images():
    for it in SUPPORTED:
        if it.regions_fallback:
            continue
        for region in it.regions:
            catalog.dlc_account(region)
            if it.sagemaker_endpoint:
                assert region in catalog.image_regions("inference"), (it.name, region)
            if it.sagemaker_training:
                assert region in catalog.image_regions("training"), (it.name, region)


def test_accounts_match_the_facts():
    assert catalog.dlc_account("us-east-1") == "763104351884"
    expected = {
        "ap-south-2": "772153158452",
        "eu-central-2": "380420809688",
        "il-central-1": "780543022126",
        "ca-west-1": "204538143572",
        "cn-north-1": "727897471807",
        "us-gov-west-1": "442386744353",
    }
    assert {r: catalog.dlc_account(r) for r in expected} == expected
    assert len(catalog.image_regions("vllm")) == 11


def test_image_uri_forms():
    uri = catalog.image_uri("pytorch-training-neuronx", "cn-north-1", "t")
    assert uri.split("/")[0].endswith(".amazonaws.com.cn")
    assert uri == "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-training-neuronx:t"
    assert catalog.image_uri("djl-inference", "eu-west-1", "t").startswith(
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/"
    )
    with pytest.raises(CatalogError, match="isolated"):
        catalog.image_uri("pytorch-training-neuronx", "us-iso-east-1", "t")
    with pytest.raises(CatalogError) as err:
        catalog.dlc_account("us-est-1")
    assert "us-east-1" in err.value.hint


def test_neuron_image_picks_the_tag_for_the_sdk():
    assert catalog.neuron_image("training", "us-east-1").startswith(
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:"
    )
    newest = {r.repository: r for r in catalog.dlc_releases()}  # rows run oldest to newest
    for purpose in ("training", "inference"):
        row = newest[f"pytorch-{purpose}-neuronx"]
        assert catalog.neuron_image(purpose, "us-east-1").endswith(f":{row.tag}")
    # The issue's tag that does not exist: 2.27's training DLC is Python 3.12 on Ubuntu 24.04, not py310.
    assert catalog.neuron_image("training", "us-east-1", "2.27.0").endswith(
        ":2.9.0-neuronx-py312-sdk2.27.0-ubuntu24.04"
    )
    # A minor line picks its newest patch release.
    assert catalog.neuron_image("training", "us-west-2", "2.21").endswith(":2.5.1-neuronx-py310-sdk2.21.1-ubuntu22.04")
    assert catalog.neuron_image("inference", "us-west-2", "2.21.0").endswith(
        ":2.5.1-neuronx-py310-sdk2.21.0-ubuntu22.04"
    )
    assert catalog.neuron_image("vllm", "us-east-1", "2.26.1").endswith("-sdk2.26.1-ubuntu22.04")
    assert ":2.7.0-optimum3.3.6-neuronx" in catalog.neuron_image("tgi", "eu-west-1")


def test_neuron_image_errors_name_what_is_known():
    with pytest.raises(CatalogError) as err:
        catalog.neuron_image("training", "us-east-1", "2.31.0")
    assert "not published after SDK 2.30" in err.value.message
    assert "2.30.0" in err.value.hint and "2.31" not in err.value.hint
    with pytest.raises(CatalogError) as err:
        catalog.neuron_image("vllm", "ap-south-2")
    assert "us-east-1" in err.value.hint
    with pytest.raises(CatalogError) as err:
        catalog.neuron_image("trainig", "us-east-1")
    assert "'training'" in err.value.hint


def test_tags_carry_their_sdk_and_respect_the_lifecycle():
    for purpose in catalog.image_purposes():
        for tag in catalog.known_tags(purpose):
            assert tag.source
            if tag.sdk and "-sdk" in tag.tag:
                assert f"sdk{tag.sdk}" in tag.tag
            elif tag.sdk:  # a TGI image's tag names its torch only: the torch of that release's Neuron DLCs
                torch = {row.torch for row in catalog.dlc_releases() if row.sdk == tag.sdk}
                assert tag.tag.split("-")[0] in torch, (tag.tag, torch)
    last = {"training": "training_dlc", "inference": "inference_dlc"}
    for purpose, flag in last.items():
        for tag in catalog.known_tags(purpose):
            assert getattr(catalog.get_sdk(tag.sdk), flag), tag.tag


def sagemaker_core_configs():
    try:
        return image_accounts_source.config_dir()
    except CatalogError:
        pytest.skip("sagemaker-core is not installed (it is in the dev extra): nothing to compare the data with")


def test_hf_tags_exist_in_sagemaker_core():
    root = sagemaker_core_configs()
    for purpose, file in (("tgi", "huggingface-llm-neuronx.json"), ("vllm", "huggingface-vllm-neuronx.json")):
        versions = json.loads((root / file).read_text())["inference"]["versions"].values()
        prefixes = {v["tag_prefix"] for v in versions}
        # in sagemaker-core's config, or in AWS's own list of the DLC account's images (which SageMaker pulls from)
        listed = catalog.account_tags.listed_tags(f"huggingface-{purpose}-inference-neuronx") or ()
        for tag in catalog.known_tags(purpose):
            assert tag.tag in listed or any(tag.tag.startswith(p + "-neuronx-py310-") for p in prefixes), tag.tag


def test_image_accounts_data_is_what_sagemaker_core_says():
    """The planner reads generated data (a bare install has no sagemaker-core); it must not drift from its source."""
    derived = image_accounts_source.accounts_from_sagemaker_core(sagemaker_core_configs())
    stored = _data.load("image_accounts")
    assert stored["dlc"] == derived["dlc"]
    assert stored["purposes"] == derived["purposes"]
    assert set(stored["purposes"]) == set(catalog.image_purposes())
    assert image_accounts_source.sagemaker_core_version() in stored["source"]


def test_regenerating_without_sagemaker_core_is_a_clear_error(monkeypatch):
    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", absent)
    with pytest.raises(CatalogError) as err:
        image_accounts_source.config_dir()
    assert "pip install sagemaker-core" in err.value.hint
    assert catalog.dlc_account("us-east-1") == "763104351884"  # planning never needs it


# ---- data hygiene and import cost ----------------------------------------------------------------


def test_every_row_has_a_source():
    for it in ALL.values():
        assert it.source.strip() and it.price_source.strip() and it.regions_source.strip(), it.name
        assert "[NSDK]" in it.source and "[BOTO]" in it.source
    for release in catalog.sdk_releases().values():
        assert release.source.strip(), release.version
    for comp in catalog.components().values():
        assert comp.source.strip() and comp.fact.strip(), comp.key
    for purpose in catalog.image_purposes():
        assert all(tag.source.strip() for tag in catalog.known_tags(purpose)), purpose
    for backend in _data.load("tp_degrees")["backends"].values():
        assert all(row["source"].strip() for row in backend["accelerators"].values())


def test_unconfirmed_rows_say_so():
    for name in ("inf2.xlarge", "trn1n.32xlarge", "trn2.48xlarge"):
        assert not catalog.get_instance(name).confirmed
    assert catalog.get_instance("trn1.32xlarge").confirmed
    assert not catalog.tp_tables()[("training", "trainium")].confirmed


def test_import_is_cheap():
    code = (
        "import sys, neurondeploy.catalog as c\n"
        "heavy = ('botocore', 'boto3', 'torch', 'sagemaker', 'yaml')\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
        "c.instance_types(); c.sdk_releases(); c.neuron_image('tgi', 'us-east-1')\n"
        "print(sorted(m for m in heavy[:4] if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_runtime_has_sharding_rules_with_a_source():
    for backend in catalog.tp_backends():
        rules = catalog.sharding_rules(backend)
        assert rules.source.strip(), backend
        assert set(rules.weight_quantization) <= {"int8", "fp8"}, backend
    assert catalog.sharding_rules("nxdi").pads_attention_heads and catalog.sharding_rules("nxdi").confirmed
    assert not catalog.sharding_rules("trace").pads_attention_heads  # one unsharded model per core
    with pytest.raises(CatalogError, match="unknown tensor-parallel backend") as refused:
        catalog.sharding_rules("nxd")
    assert "nxdi" in refused.value.hint
