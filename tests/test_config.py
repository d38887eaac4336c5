"""The composed configs: shared keys come from conf/common.yaml, agent.network is one of three strings."""

import pytest
import yaml
from hydra import compose, initialize_config_dir

from ai4ai import CONF_DIR, PROJECT_ROOT, pipeline
from ai4ai.grading.context import NETWORK_MODES

TOP = ("config", "grade", "calibrate", "check_task", "audit", "report", "view")
AGENTS = sorted(p.stem for p in (PROJECT_ROOT / "conf" / "agent").glob("*.yaml"))


@pytest.mark.parametrize("name", TOP)
def test_every_top_level_config_gets_the_shared_keys(name, monkeypatch, tmp_path):
    monkeypatch.setenv("AI4AI_OUTPUTS", str(tmp_path))
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            config_name=name,
            overrides=["task=optimizer"] if name not in ("audit", "report", "view") else [],
            return_hydra_config=True,
        )
    assert cfg.outputs == str(tmp_path) and cfg.hydra.job.chdir is False
    assert "outputs" not in yaml.safe_load((PROJECT_ROOT / "conf" / f"{name}.yaml").read_text())


@pytest.mark.parametrize("agent", AGENTS)
def test_agent_network_is_a_mode_string(agent):
    raw = yaml.safe_load((PROJECT_ROOT / "conf" / "agent" / f"{agent}.yaml").read_text())
    assert raw.get("network", "none") in NETWORK_MODES


@pytest.mark.parametrize("value", ["true", "false", "api"])
def test_a_network_outside_the_modes_is_refused(compose_cfg, tmp_path, capsys, value):
    cfg = compose_cfg(
        "config", ["task=optimizer", "agent=command", "agent.command=true", f"agent.network={value}", "dry_run=true"]
    )
    with pytest.raises(SystemExit) as e:
        pipeline.run(cfg, tmp_path)
    assert e.value.code == 2 and "use none, api_only or open" in capsys.readouterr().out
