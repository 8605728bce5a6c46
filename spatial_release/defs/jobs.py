from spatial_release.defs.assets import monthly_graph, quarterly_graph
from spatial_release.defs.review import risk_review_job

release_job = quarterly_graph.job
monthly_release_job = monthly_graph.job
ALL_JOBS = [release_job, monthly_release_job, risk_review_job]
