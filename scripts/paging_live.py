"""Rule `paging_live`: the study's 10,000-slot pool on two vLLM servers (each lending the same 9,216
slots), one 512-token block per request against paging, each driven above its limit -> paging_live.json."""

from infbench.core.stage import run_stage
from infbench.engines.server_metrics import server_kv_facts
from infbench.engines.servers import spec_from_params, start_server
from infbench.engines.vllm_server import ServerError, started_together
from infbench.kv.paging_live import (
    SCRAPE_INTERVAL_S,
    drive,
    lent_slots,
    live_ratio,
    predict,
    server_pools,
    side_by_side,
    study_arithmetic,
    study_requests,
)


def main(stage):
    params = stage.params
    settings = params.paging_live
    from transformers import AutoTokenizer

    requests = study_requests(AutoTokenizer.from_pretrained(stage.model_dir), settings)
    pools = server_pools(settings, params.device)
    spec = spec_from_params(params, stage.model_dir, stage.facts["name"])
    servers = {
        name: start_server(
            spec.with_engine(
                max_model_len=settings["max_model_len"],
                block_size=block_size,
                enable_prefix_caching=False,
                max_num_seqs=settings["requests"],  # so that only memory limits how many run
            ).with_flags(num_gpu_blocks_override=num_blocks),
            stage.servers_log_dir / f"{name}.log",
        )
        for name, (block_size, num_blocks) in pools.items()
    }
    results = []
    with started_together({f"the {name} server": server for name, server in servers.items()}):
        for name, server in servers.items():
            block_size, num_blocks = pools[name]
            kv = server_kv_facts(server.base_url)
            print(f"{name}: {kv['num_blocks']} blocks of {kv['block_size']} tokens, up after {server.startup_s:.0f} s")
            live = drive(server, requests, SCRAPE_INTERVAL_S, params.server["request_timeout_s"])
            if not server.alive():
                raise ServerError(f"the {name} server died while driven; its log:\n{server.log_tail()}")
            predicted = predict(settings, block_size, num_blocks)
            result = side_by_side(name, block_size, kv, predicted, live, lent_slots(settings))
            results.append(result)
            print(
                f"{name}: peak running {live['peak_num_requests_running']:.0f} (simulator: "
                f"{result['simulator']['users_at_peak_footprint']} at peak footprint, replay peak "
                f"{result['simulator']['replay_peak_running']}), peak waiting {live['peak_num_requests_waiting']:.0f}, "
                f"preemptions {live['preemptions']:.0f} (replay {result['simulator']['replay_preemptions']})"
            )
    stage.write(
        stage.output[0],
        {
            "model": stage.facts["name"],
            "settings": settings,
            "study": study_arithmetic(),
            "servers": results,
            "live_ratio": live_ratio(results),
        },
        schema="paging_live",
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
